"""``GatewayClient`` and ``EmbeddingClient``: the original library's entry points.

Each client owns one runtime gateway built from configuration (the same keys as the original:
``{SCOPE}__{PROVIDER}__{N}__{FIELD}``, the scope keys, ``PGW_*``). Calls are coroutines; the
governed work runs on the process's Rust runtime without the GIL.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Type, Union

from . import _native
from ._bridge import submit
from . import batch as _batch
from .batch import BatchRun
from .exceptions import ConfigError
from .providers import Registry, registry_args
from .settings import GatewaySettings
from .structured import SchemaCall, schema_call
from .types import ChatDelta, EmbeddingResponse, LLMResponse, TelemetryStatus, ToolCallDelta

__all__ = ["GatewayClient", "EmbeddingClient", "ChatStream", "BatchRun"]

Messages = Sequence[Mapping[str, Any]]
EnvArg = Union[None, Mapping[str, str], "os.PathLike[str]", str]


def _env_args(env: EnvArg) -> Dict[str, Any]:
    """``env=None``: the process environment over ``./.env``; a mapping: exactly those keys; a
    path: that ``.env`` file under the process environment."""
    if env is None:
        return {}
    if isinstance(env, (str, os.PathLike)):
        return {"dotenv": os.fspath(env)}
    return {"env": {str(k): str(v) for k, v in env.items()}}


def _settings_args(settings: Any) -> Dict[str, Any]:
    if isinstance(settings, GatewaySettings):
        return {"env": settings.to_env()}
    if isinstance(settings, Mapping):
        return {"env": {str(k): str(v) for k, v in settings.items()}}
    raise TypeError(
        "settings must be a GatewaySettings (EmbeddingSettings, OcrSettings) or a mapping of "
        "configuration keys to values (e.g. {'LLM__OPENAI__1__BASE_URL': ..., "
        "'PGW_LIMITER_BACKEND': 'memory'})"
    )


def _injection_args(limiter: Any, breaker: Any, cache: Any, telemetry: Any,
                    registry: Optional[Registry]) -> Dict[str, Any]:
    """The injection keywords of the original's ``from_env`` / ``from_settings``.

    ``limiter=`` / ``breaker=`` take another client's ``.limiter`` / ``.breaker``: this runtime
    keeps limits and breakers in one governance store, so they are shared together. ``cache=``
    and ``telemetry=`` objects cannot be handed over: clients share a cache or a telemetry table
    through the backend they are configured with.
    """
    args: Dict[str, Any] = {}
    if (limiter is None) != (breaker is None) or (limiter is not None and limiter != breaker):
        raise ConfigError(
            "limiter= and breaker= are shared together here (limits and breakers live in one "
            "governance store): pass limiter=other.limiter, breaker=other.breaker of the same "
            "client"
        )
    if limiter is not None:
        if not isinstance(limiter, _native.NativeGovernance):
            raise TypeError("limiter=/breaker= take another client's .limiter / .breaker")
        args["governance"] = limiter
    if cache is not None:
        raise ConfigError(
            "cache= cannot inject a cache object into this runtime: clients share a response "
            "cache through PGW_CACHE_BACKEND=redis with the same REDIS_URL and "
            "PGW_CACHE_NAMESPACE"
        )
    if telemetry is not None:
        raise ConfigError(
            "telemetry= cannot inject a recorder into this runtime: point the clients' "
            "PGW_TELEMETRY_* keys at the same SQLite file or Postgres DSN (rows of every client "
            "land in the one llm_calls table)"
        )
    if registry is not None:
        args["profiles"] = registry_args(registry)
    return args


class _Client:
    _kind = "chat"

    def __init__(self, native: "_native.NativeGateway") -> None:
        self._native = native

    _default_scope = "LLM"

    @classmethod
    def from_env(cls, scope: Optional[str] = None, *, limiter: Any = None, breaker: Any = None,
                 cache: Any = None, telemetry: Any = None, registry: Optional[Registry] = None,
                 env: EnvArg = None):
        """Build from the environment: ``env=None`` reads the process environment over
        ``./.env``; a mapping replaces the environment; a path names a ``.env`` file.
        A missing or invalid key raises ``ConfigError`` naming it.

        ``limiter=`` / ``breaker=``: another client's ``.limiter`` / ``.breaker`` (both), to be
        governed by the same limits and breakers; ``registry=``: provider profiles added to the
        built-in ones (``{**DEFAULT_PROFILES, "mylab": ProviderProfile(...)}``). ``cache=`` and
        ``telemetry=`` raise ``ConfigError`` naming the configuration that shares them.
        """
        injected = _injection_args(limiter, breaker, cache, telemetry, registry)
        scope = scope or cls._default_scope
        return cls(_native.NativeGateway(scope, cls._kind, **_env_args(env), **injected))

    @classmethod
    def from_settings(cls, settings: Union[GatewaySettings, Mapping[str, str]],
                      scope: Optional[str] = None, *, limiter: Any = None, breaker: Any = None,
                      cache: Any = None, telemetry: Any = None,
                      registry: Optional[Registry] = None):
        """Build from a ``GatewaySettings`` (its scope) or a mapping of configuration keys (no
        environment, no ``.env``); the injection keywords are those of ``from_env``."""
        injected = _injection_args(limiter, breaker, cache, telemetry, registry)
        if scope is None:
            scope = settings.scope if isinstance(settings, GatewaySettings) else cls._default_scope
        return cls(_native.NativeGateway(scope, cls._kind, **_settings_args(settings), **injected))

    @property
    def scope(self) -> str:
        """The scope this client calls."""
        return self._native.scope

    @property
    def limiter(self) -> Any:
        """This client's governance store (limits and breakers), to pass as ``limiter=`` and
        ``breaker=`` to another client; ``None`` when the limiter and the breaker are configured
        on different kinds of backend."""
        return self._native.governance

    @property
    def breaker(self) -> Any:
        """The same store as ``limiter`` (limits and breakers are kept together)."""
        return self._native.governance

    @property
    def telemetry_status(self) -> TelemetryStatus:
        """Read-only snapshot of the telemetry writer (``degraded``, ``fatal``, ``reason``,
        ``dropped_rows``, …)."""
        return self._native.telemetry_status()

    async def leases_held(self) -> int:
        """Governance leases held by this scope now (0 when no call holds a permit)."""
        return await submit(self._native.leases_held)

    async def aclose(self) -> None:
        """Flush telemetry and stop this client's runtime actors. Idempotent."""
        await submit(self._native.aclose)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class _Batches:
    """``run_batch`` for the chat and embedding clients (OCR has no batch lines)."""

    _native: "_native.NativeGateway"

    def run_batch(
        self,
        items: "_batch.BatchItems",
        *,
        journal: Union[None, str, "os.PathLike[str]"] = None,
        scope: Optional[str] = None,
        max_concurrency: int = 1024,
        max_item_age_s: float = 3600.0,
        schema: Any = None,
    ) -> "_batch.BatchRun":
        """A batch job over ``items`` (what ``polygateway batch`` runs):
        ``async for result in client.run_batch(items, journal="job.journal")`` yields one
        ``BatchResult`` per item as it finishes.

        Items are OpenAI Batch API input lines (``{"custom_id", "method": "POST", "url":
        "/v1/chat/completions" | "/v1/embeddings", "body"}``) or plain ``{"custom_id",
        "messages", …}`` lines, as dicts or JSON text, from an iterable or async iterable read
        as the job needs them. ``body.model`` names a scope or a ``PGW_SERVER_MODEL_ALIASES``
        alias; other lines go to ``scope`` (default: this client's). Items refused as
        unavailable are sent again after their ``retry_after_s`` while younger than
        ``max_item_age_s``; bad items and failed calls are results with their error, never
        raised. ``journal``: a SQLite file recording each finished item; the same items run
        again with it replay those instead of sending them (resume after a crash or
        ``stop()``). ``schema`` (a JSON Schema dict or a pydantic model class): chat items
        without a ``response_format`` go through the structured ladder. ``max_concurrency``
        caps the items in flight; the sources' pacers decide how many reach the upstreams.
        """
        return _batch.start(self._native, items, journal=journal, scope=scope,
                            max_concurrency=max_concurrency, max_item_age_s=max_item_age_s,
                            schema=schema)


class GatewayClient(_Batches, _Client):
    """Governed chat calls on one scope (LLM, VLM, JUDGE, …)."""

    _kind = "chat"

    async def chat(
        self,
        messages: Messages,
        *,
        session_id: Optional[str] = None,
        parent_call_id: Optional[str] = None,
        cache_salt: Optional[str] = None,
        cache_namespace: Optional[str] = None,
        structured: Union[None, str, Type[Any]] = None,
        stream: bool = True,
        overlay: Optional[Mapping[str, Any]] = None,
        tenant_id: Optional[str] = None,
        meta: Optional[Mapping[str, Any]] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        tool_choice: Any = None,
        priority: Optional[str] = None,
        deadline_s: Optional[float] = None,
        weight: Optional[int] = None,
        **openai_params: Any,
    ) -> LLMResponse:
        """One governed chat call.

        ``messages`` are OpenAI message dicts (content may be a multimodal parts list with
        ``image_url`` data URLs). ``structured`` is ``None``, ``"json"`` (repair the answer into
        a JSON value) or a pydantic model class (schema sent to the model, answer validated with
        ``model_validate``, errors fed back on a bounded re-ask). ``overlay`` holds sampling
        parameters (they enter the cache key); ``tenant_id`` / ``meta`` attribute telemetry and
        are validated (``ValueError``); neither enters the cache key. ``tools`` /
        ``tool_choice`` and any other OpenAI request keyword (``logprobs=True``, ``n=2``,
        ``seed=7``, ``max_completion_tokens=…``) are passed through to the upstream like
        ``overlay`` entries (and enter the cache key); the answer's ``tool_calls``,
        ``finish_reason``, ``refusal`` and ``logprobs`` are on the response.

        ``priority`` (``"interactive"``, ``"normal"`` — the default — or ``"batch"``) orders the
        call among calls waiting for capacity; ``weight`` (1–1000) is its tenant's share among
        waiting tenants of that class; ``deadline_s`` answers within that many seconds or not at
        all: past it the call raises ``AllSourcesExhausted`` with reason ``deadline_exceeded``
        and nothing more is sent. Bad values raise ``ValueError``.
        """
        text = _messages_json(messages)
        overlay_json = _request_overlay(overlay, tools, tool_choice, openai_params)
        meta_dict = None if meta is None else dict(meta)
        common = (session_id, parent_call_id, cache_salt, cache_namespace, stream,
                  overlay_json, tenant_id, meta_dict, priority, deadline_s, weight)
        if structured is None or structured == "json":
            return await submit(self._native.chat, text, *common, structured == "json")
        call: SchemaCall = schema_call(structured)
        response = await submit(
            self._native.chat_schema, text, call.name, call.schema_json, call.validate, *common
        )
        if response.structured_data is None:
            # Tool calls or a refusal: a valid answer that is not a value, returned as is.
            return response
        return dataclasses.replace(response, structured_data=call.instance(response.structured_data))


    def chat_stream(
        self,
        messages: Messages,
        *,
        session_id: Optional[str] = None,
        parent_call_id: Optional[str] = None,
        cache_salt: Optional[str] = None,
        cache_namespace: Optional[str] = None,
        overlay: Optional[Mapping[str, Any]] = None,
        tenant_id: Optional[str] = None,
        meta: Optional[Mapping[str, Any]] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        tool_choice: Any = None,
        **openai_params: Any,
    ) -> "ChatStream":
        """A governed streaming call (this runtime's addition; the original had none).

        ``async for delta in client.chat_stream(messages):`` yields ``ChatDelta`` items; after
        the loop, ``stream.response`` is the final ``LLMResponse``. Until the first delta,
        failures are retried invisibly; after it, a failure raises ``StreamInterruptedError``.
        Leaving the loop early (or ``await stream.aclose()``) cancels the call. Tool-call pieces
        arrive in ``delta.tool_calls`` (``ToolCallDelta``); ``tools`` and other OpenAI keywords
        are passed through as in ``chat``.
        """
        native = self._native.chat_stream(
            _messages_json(messages), session_id, parent_call_id, cache_salt, cache_namespace,
            _request_overlay(overlay, tools, tool_choice, openai_params), tenant_id,
            None if meta is None else dict(meta),
        )
        return ChatStream(native)


class ChatStream:
    """The async iterator ``GatewayClient.chat_stream`` returns."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.response: Optional[LLMResponse] = None

    def __aiter__(self) -> "ChatStream":
        return self

    async def __anext__(self) -> ChatDelta:
        while True:
            batch = await submit(self._native.next_batch)
            if batch is None:
                raise StopAsyncIteration
            content, thinking, response, pieces, refusal = batch
            if response is not None:
                self.response = response
            if content or thinking or pieces or refusal:
                calls = tuple(ToolCallDelta(*p) for p in pieces)
                return ChatDelta(content, thinking, calls, refusal)

    async def aclose(self) -> None:
        """Cancel the call if it is still running (idempotent)."""
        self._native.close()

    def __del__(self) -> None:
        # Leaving an `async for` early drops the iterator: cancel the upstream request too.
        try:
            self._native.close()
        except Exception:
            pass


class EmbeddingClient(_Batches, _Client):
    """Governed embeddings on one scope (batched per ``{SCOPE}__BATCH_SIZE``)."""

    _kind = "embedding"
    _default_scope = "EMBED"

    async def embed(
        self,
        texts: Iterable[str],
        *,
        session_id: Optional[str] = None,
        parent_call_id: Optional[str] = None,
        tenant_id: Optional[str] = None,
        meta: Optional[Mapping[str, Any]] = None,
    ) -> EmbeddingResponse:
        """Embed ``texts``; ``.vectors`` come back in input order."""
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be strings")
        return await submit(
            self._native.embed, texts, session_id, parent_call_id, tenant_id,
            None if meta is None else dict(meta),
        )


def _messages_json(messages: Messages) -> str:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
    try:
        return json.dumps(messages, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"messages must be JSON-serialisable: {exc}") from None


def _request_overlay(
    overlay: Optional[Mapping[str, Any]],
    tools: Optional[Sequence[Mapping[str, Any]]],
    tool_choice: Any,
    openai_params: Mapping[str, Any],
) -> Optional[str]:
    """The call's overlay: ``overlay``, then the OpenAI keywords given directly (they win)."""
    if overlay is not None and not isinstance(overlay, Mapping):
        raise TypeError("overlay must be a dict of sampling parameters")
    merged = dict(overlay or {})
    if tools is not None:
        if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
            raise TypeError("tools must be a list of OpenAI tool dicts")
        merged["tools"] = list(tools)
    if tool_choice is not None:
        merged["tool_choice"] = tool_choice
    merged.update(openai_params)
    if overlay is None and not merged:
        return None
    return _overlay_json(merged)


def _overlay_json(overlay: Mapping[str, Any]) -> str:
    if not isinstance(overlay, Mapping):
        raise TypeError("overlay must be a dict of sampling parameters")
    try:
        return json.dumps(dict(overlay), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"overlay must be JSON-serialisable with finite numbers: {exc}") from None
