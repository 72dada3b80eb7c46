"""Mock upstreams for tests: the runtime's own fault-injecting servers, started from Python.

``MockUpstream`` speaks the OpenAI-compatible API (chat completions, streaming or not,
embeddings) on ``127.0.0.1``; ``MockOcr`` speaks MonkeyOCR. ``mock_env`` gives the minimal
configuration for a scope over a mock. Present in wheels built with the ``testkit`` feature
(the default).
"""

from __future__ import annotations

from typing import Any, Dict

from . import _native

if not _native.HAS_TESTKIT:  # pragma: no cover - only in wheels built without the feature
    raise ImportError(
        "polygateway.testing is not in this build (built with --no-default-features); "
        "rebuild with the 'testkit' cargo feature"
    )

__all__ = ["MockUpstream", "MockOcr", "mock_env"]


class MockUpstream(_native.NativeMockUpstream):
    """An OpenAI-compatible mock on ``127.0.0.1:<port>``; ``base_url`` ends with ``/v1``.

    Behaviours: ``healthy`` (``content``, ``chunks``, ``ttft_ms``, ``inter_token_ms``),
    ``slow`` (``delay_ms``), ``black_hole``, ``rate_limited`` (``retry_after_s``),
    ``insufficient_quota``, ``unauthorized``, ``forbidden``, ``bad_request``,
    ``server_error`` (``status``), ``truncated_stream``, ``early_eof``, ``malformed_frame``,
    ``empty_completion``, ``reasoning``, ``think_tags``, ``no_usage``,
    ``scripted_content`` (``contents=[...]``: one answer per request, the last repeats).
    """


class MockOcr(_native.NativeMockOcr):
    """A MonkeyOCR mock on ``127.0.0.1:<port>`` (text, layout, health)."""


def mock_env(scope: str, base_url: str, **extra: Any) -> Dict[str, str]:
    """Minimal configuration of ``scope`` with one source over ``base_url`` (memory governance,
    no cache, no telemetry, a 30 s timeout and no streaming watchdog); ``extra`` adds or
    overrides keys."""
    scope = scope.upper()
    provider = "MONKEY" if scope.startswith("OCR") else "OPENAI"
    env = {
        "PGW_LIMITER_BACKEND": "memory",
        "PGW_BREAKER_BACKEND": "memory",
        "PGW_CACHE_BACKEND": "none",
        "PGW_TELEMETRY_BACKEND": "none",
        f"{scope}__{provider}__1__BASE_URL": base_url,
        f"{scope}__{provider}__1__API_KEY": "sk-test",
        f"{scope}__{provider}__1__MODEL": "test-model",
        f"{scope}__{provider}__1__TIMEOUT_S": "30",
    }
    if scope.startswith("EMBED"):
        env[f"{scope}__BATCH_SIZE"] = "16"
    env.update({k: str(v) for k, v in extra.items()})
    return env
