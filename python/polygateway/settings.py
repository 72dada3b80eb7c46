"""Settings built in code (the original library's ``GatewaySettings`` / ``EmbeddingSettings`` /
``OcrSettings`` / ``SourceConfig``), for ``GatewayClient.from_settings(settings)``.

Each field is one configuration key of the original (``SourceConfig.timeout_s`` is
``{SCOPE}__{PROVIDER}__{N}__TIMEOUT_S``, ``GatewaySettings.cache_backend`` is
``PGW_CACHE_BACKEND``, …); ``None`` leaves a key unset. ``to_env()`` renders the keys, and the
clients parse them with the same rules as ``from_env`` — so a settings object is refused with
the same message, naming the key, as the environment it stands for. ``SourceConfig`` checks its
invariants when it is built.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = ["SourceConfig", "GatewaySettings", "EmbeddingSettings", "OcrSettings"]

_NAME = re.compile(r"^([a-z0-9][a-z0-9_]*?)_([0-9]+)$")
_PROTECTED_BODY_KEYS = ("model", "messages", "stream", "stream_options")


def _key_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Mapping):
        return json.dumps(dict(value), ensure_ascii=False)
    return str(value)


def _positive(owner: str, name: str, value: Any, *, integer: bool = False,
              zero: bool = False) -> None:
    if value is None:
        return
    kinds = (int,) if integer else (int, float)
    bad = isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) \
        or value < 0 or (value == 0 and not zero)
    if bad:
        allowed = "an integer" if integer else "a number"
        raise ValueError(f"{owner}.{name} must be {allowed} {'>= 0' if zero else '> 0'}, "
                         f"got {value!r}")


@dataclass(frozen=True)
class SourceConfig:
    """One source: ``name`` is ``{provider}_{n}`` (``minimax_1`` is ``{SCOPE}__MINIMAX__1__*``).

    Invariants checked here: ``base_url`` / ``api_key`` / ``model`` non-empty (a service without
    authentication takes the placeholder ``"none"``); ``timeout_s`` > 0; limits >= 0 (0 = gate
    off); the watchdog timeouts set together with ``0 < inter_token_timeout_s <
    ttft_timeout_s < timeout_s``; ``extra_body`` a dict without ``model`` / ``messages`` /
    ``stream`` / ``stream_options``. ``api_key`` never appears in ``repr``.
    """

    name: str
    base_url: str
    api_key: str = field(repr=False)
    model: str
    timeout_s: Optional[float] = None
    max_concurrency: int = 0
    rpm: int = 0
    tpm: int = 0
    est_tokens: Optional[int] = None
    ttft_timeout_s: Optional[float] = None
    inter_token_timeout_s: Optional[float] = None
    enable_thinking: Optional[bool] = None
    missing_done: str = "retry"
    trust_env: bool = True
    extra_body: Optional[Mapping[str, Any]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name.lower()):
            raise ValueError(
                f"SourceConfig.name {self.name!r} must be '<provider>_<n>' (e.g. 'minimax_1')"
            )
        object.__setattr__(self, "name", self.name.lower())
        for key in ("base_url", "api_key", "model"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"SourceConfig.{key} of {self.name} must be a non-empty string"
                                 + (" (use 'none' for a service without a key)"
                                    if key == "api_key" else ""))
        owner = f"SourceConfig({self.name})"
        _positive(owner, "timeout_s", self.timeout_s)
        for key in ("max_concurrency", "rpm", "tpm"):
            _positive(owner, key, getattr(self, key), integer=True, zero=True)
        _positive(owner, "est_tokens", self.est_tokens, integer=True)
        _positive(owner, "ttft_timeout_s", self.ttft_timeout_s)
        _positive(owner, "inter_token_timeout_s", self.inter_token_timeout_s)
        ttft, inter = self.ttft_timeout_s, self.inter_token_timeout_s
        if (ttft is None) != (inter is None):
            raise ValueError(f"{owner}: ttft_timeout_s and inter_token_timeout_s are set together "
                             "(the streaming watchdog needs both)")
        if ttft is not None:
            limit = self.timeout_s
            if not (inter < ttft and (limit is None or ttft < limit)):
                raise ValueError(f"{owner}: the watchdog needs 0 < inter_token_timeout_s "
                                 f"({inter}) < ttft_timeout_s ({ttft}) < timeout_s ({limit})")
        if self.missing_done not in ("retry", "salvage"):
            raise ValueError(f"{owner}.missing_done must be 'retry' or 'salvage'")
        if self.extra_body is not None:
            if not isinstance(self.extra_body, Mapping):
                raise ValueError(f"{owner}.extra_body must be a dict of request-body keys")
            protected = sorted(set(self.extra_body) & set(_PROTECTED_BODY_KEYS))
            if protected:
                raise ValueError(f"{owner}.extra_body may not set {', '.join(protected)} "
                                 "(the gateway owns them)")
            object.__setattr__(self, "extra_body", MappingProxyType(dict(self.extra_body)))

    @property
    def provider(self) -> str:
        """The provider part of the name (``minimax`` of ``minimax_1``): its profile's key."""
        return _NAME.match(self.name).group(1)

    def effective_est_tokens(self) -> int:
        """Tokens reserved per attempt by the TPM gate: ``est_tokens`` when set, else
        ``max(1, tpm // 60)`` when ``tpm`` > 0, else 0 (the original's rule)."""
        if self.est_tokens:
            return self.est_tokens
        return max(1, self.tpm // 60) if self.tpm > 0 else 0

    def to_env(self, scope: str) -> Dict[str, str]:
        """This source's ``{SCOPE}__{PROVIDER}__{N}__*`` keys."""
        provider, n = _NAME.match(self.name).groups()
        prefix = f"{scope.upper()}__{provider.upper()}__{n}__"
        values = {
            "BASE_URL": self.base_url, "API_KEY": self.api_key, "MODEL": self.model,
            "TIMEOUT_S": self.timeout_s, "MAX_CONCURRENCY": self.max_concurrency or None,
            "RPM": self.rpm or None, "TPM": self.tpm or None, "EST_TOKENS": self.est_tokens,
            "TTFT_TIMEOUT_S": self.ttft_timeout_s,
            "INTER_TOKEN_TIMEOUT_S": self.inter_token_timeout_s,
            "ENABLE_THINKING": self.enable_thinking,
            "MISSING_DONE": None if self.missing_done == "retry" else self.missing_done,
            "TRUST_ENV": None if self.trust_env else False,
            "EXTRA_BODY": self.extra_body,
        }
        return {prefix + k: _key_value(v) for k, v in values.items() if v is not None}


# GatewaySettings field → configuration key ({SCOPE} is replaced by the scope).
_GATEWAY_KEYS = {
    "limiter_backend": "PGW_LIMITER_BACKEND",
    "breaker_backend": "PGW_BREAKER_BACKEND",
    "cache_backend": "PGW_CACHE_BACKEND",
    "telemetry_backend": "PGW_TELEMETRY_BACKEND",
    "redis_url": "REDIS_URL",
    "cache_namespace": "PGW_CACHE_NAMESPACE",
    "cache_ttl_s": "PGW_CACHE_TTL_S",
    "telemetry_sqlite_path": "PGW_TELEMETRY_SQLITE_PATH",
    "telemetry_pg_dsn": "PGW_TELEMETRY_PG_DSN",
    "telemetry_schema_mode": "PGW_TELEMETRY_SCHEMA_MODE",
    "telemetry_text_cap": "PGW_TELEMETRY_TEXT_CAP",
    "telemetry_pg_pool_max": "PGW_TELEMETRY_PG_POOL_MAX",
    "telemetry_pg_write_timeout_s": "PGW_TELEMETRY_PG_WRITE_TIMEOUT_S",
    "pricing_path": "PGW_PRICING_PATH",
    "structured_max_retries": "PGW_STRUCTURED_MAX_RETRIES",
    "lease_ttl_s": "PGW_LEASE_TTL_S",
    "max_attempts": "{SCOPE}__RETRY__MAX_ATTEMPTS",
    "backoff_base_s": "{SCOPE}__RETRY__BACKOFF_BASE_S",
    "backoff_max_s": "{SCOPE}__RETRY__BACKOFF_MAX_S",
    "breaker_fail_threshold": "{SCOPE}__BREAKER__FAIL_THRESHOLD",
    "breaker_cooldown_s": "{SCOPE}__BREAKER__COOLDOWN_S",
    "breaker_probe_ttl_s": "{SCOPE}__BREAKER__PROBE_TTL_S",
    "breaker_min_calls": "{SCOPE}__BREAKER__MIN_CALLS",
    "breaker_fail_rate": "{SCOPE}__BREAKER__FAIL_RATE",
    "breaker_window_s": "{SCOPE}__BREAKER__WINDOW_S",
    "breaker_max_cooldown_s": "{SCOPE}__BREAKER__MAX_COOLDOWN_S",
    "stall_window_s": "{SCOPE}__BACKPRESSURE__STALL_WINDOW_S",
    "poll_interval_s": "{SCOPE}__BACKPRESSURE__POLL_INTERVAL_S",
    "selector": "{SCOPE}__SELECTOR",
    "quota_full": "{SCOPE}__QUOTA_FULL",
    "circuit_open": "{SCOPE}__CIRCUIT_OPEN",
    "global_max_concurrency": "{SCOPE}__GLOBAL__MAX_CONCURRENCY",
    "global_rpm": "{SCOPE}__GLOBAL__RPM",
    "global_tpm": "{SCOPE}__GLOBAL__TPM",
    "batch_size": "{SCOPE}__BATCH_SIZE",
    "normalize": "{SCOPE}__NORMALIZE",
    "expected_dim": "{SCOPE}__EXPECTED_DIM",
}


@dataclass(frozen=True)
class GatewaySettings:
    """A scope's sources and the assembly keys (``PGW_*``), for ``from_settings``.

    The four backend fields are required, as in the original (``none`` is a valid cache and
    telemetry backend); every other field left ``None`` is unset, and the runtime's documented
    rule for that key applies. Resilience fields are the scope keys (``max_attempts`` is
    ``{SCOPE}__RETRY__MAX_ATTEMPTS``, …).
    """

    scope: str
    sources: Tuple[SourceConfig, ...]
    limiter_backend: str
    breaker_backend: str
    cache_backend: str
    telemetry_backend: str
    redis_url: Optional[str] = field(default=None, repr=False)
    cache_namespace: Optional[str] = None
    cache_ttl_s: Optional[float] = None
    telemetry_sqlite_path: Optional[str] = None
    telemetry_pg_dsn: Optional[str] = field(default=None, repr=False)
    telemetry_schema_mode: Optional[str] = None
    telemetry_text_cap: Optional[int] = None
    telemetry_pg_pool_max: Optional[int] = None
    telemetry_pg_write_timeout_s: Optional[float] = None
    pricing_path: Optional[str] = None
    structured_max_retries: Optional[int] = None
    lease_ttl_s: Optional[float] = None
    max_attempts: Optional[int] = None
    backoff_base_s: Optional[float] = None
    backoff_max_s: Optional[float] = None
    breaker_fail_threshold: Optional[int] = None
    breaker_cooldown_s: Optional[float] = None
    breaker_probe_ttl_s: Optional[float] = None
    breaker_min_calls: Optional[int] = None
    breaker_fail_rate: Optional[float] = None
    breaker_window_s: Optional[float] = None
    breaker_max_cooldown_s: Optional[float] = None
    stall_window_s: Optional[float] = None
    poll_interval_s: Optional[float] = None
    selector: Optional[str] = None
    quota_full: Optional[str] = None
    circuit_open: Optional[str] = None
    global_max_concurrency: Optional[int] = None
    global_rpm: Optional[int] = None
    global_tpm: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.scope, str) or not re.match(r"^[A-Za-z][A-Za-z0-9]*$", self.scope):
            raise ValueError(f"{type(self).__name__}.scope {self.scope!r} must be a name like "
                             "'LLM' (letters and digits)")
        object.__setattr__(self, "scope", self.scope.upper())
        sources = tuple(self.sources)
        if not sources or not all(isinstance(s, SourceConfig) for s in sources):
            raise ValueError(f"{type(self).__name__}.sources must be one or more SourceConfig")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"{type(self).__name__}.sources repeat a name: {names}")
        object.__setattr__(self, "sources", sources)
        for key in ("limiter_backend", "breaker_backend", "cache_backend", "telemetry_backend"):
            if not isinstance(getattr(self, key), str):
                raise ValueError(f"{type(self).__name__}.{key} is required "
                                 f"({_GATEWAY_KEYS[key]}; no default fills it in)")

    def to_env(self) -> Dict[str, str]:
        """The configuration keys these settings stand for."""
        env: Dict[str, str] = {}
        for source in self.sources:
            env.update(source.to_env(self.scope))
        for f in fields(self):
            key = _GATEWAY_KEYS.get(f.name)
            value = getattr(self, f.name)
            if key is not None and value is not None:
                env[key.replace("{SCOPE}", self.scope)] = _key_value(value)
        return env


@dataclass(frozen=True)
class EmbeddingSettings(GatewaySettings):
    """``GatewaySettings`` of an embeddings scope: ``batch_size`` (``{SCOPE}__BATCH_SIZE``) is
    required, ``normalize`` and ``expected_dim`` optional."""

    batch_size: Optional[int] = None
    normalize: Optional[bool] = None
    expected_dim: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size is None:
            raise ValueError("EmbeddingSettings.batch_size is required ({SCOPE}__BATCH_SIZE: "
                             "batching is behaviour, it has no default)")
        _positive("EmbeddingSettings", "batch_size", self.batch_size, integer=True)
        _positive("EmbeddingSettings", "expected_dim", self.expected_dim, integer=True)


@dataclass(frozen=True)
class OcrSettings(GatewaySettings):
    """``GatewaySettings`` of an OCR scope (MonkeyOCR sources; no keys of its own)."""
