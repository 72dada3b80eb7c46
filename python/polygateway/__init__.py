"""polygateway: governed LLM / VLM / embedding / OCR calls, the original library's API over the
polygateway Rust runtime (one tokio runtime per process, the GIL released while it works).

Quick start::

    from polygateway import GatewayClient

    client = GatewayClient.from_env("LLM")
    try:
        resp = await client.chat([{"role": "user", "content": "hello"}])
        print(resp.content, resp.source_name, resp.latency_ms)
    finally:
        await client.aclose()
"""

from __future__ import annotations

from . import _native
from . import _bridge  # noqa: F401  (registers the exit and fork hooks)
from .client import BatchRun, ChatStream, EmbeddingClient, GatewayClient
from .exceptions import (
    AllSourcesExhausted,
    CircuitOpenError,
    ConfigError,
    GatewayClosedError,
    GatewayUnavailableError,
    GovernanceBackendError,
    PolyGatewayError,
    RequestRejectedError,
    ResultInvalidError,
    SourceDeadError,
    SourceNotConfiguredError,
    StreamInterruptedError,
    TransientError,
)
from .pricing import ModelPrice, PricingTable
from .providers import DEFAULT_PROFILES, ProviderProfile
from .settings import EmbeddingSettings, GatewaySettings, OcrSettings, SourceConfig
from .types import (
    BatchProgress,
    BatchResult,
    ChatDelta,
    EmbeddingResponse,
    LLMResponse,
    TelemetryStatus,
    ToolCall,
    ToolCallDelta,
)

__version__: str = _native.__version__
"""The package version (the Rust crate's, so wheel, runtime and Python agree)."""

__all__ = [
    "GatewayClient",
    "EmbeddingClient",
    "LLMResponse",
    "ToolCall",
    "ToolCallDelta",
    "ChatStream",
    "ChatDelta",
    "BatchRun",
    "BatchResult",
    "BatchProgress",
    "EmbeddingResponse",
    "TelemetryStatus",
    "GatewaySettings",
    "EmbeddingSettings",
    "OcrSettings",
    "SourceConfig",
    "ProviderProfile",
    "DEFAULT_PROFILES",
    "PricingTable",
    "ModelPrice",
    "telemetry_schema_sql",
    "__version__",
    "PolyGatewayError",
    "TransientError",
    "SourceDeadError",
    "RequestRejectedError",
    "ResultInvalidError",
    "GatewayUnavailableError",
    "CircuitOpenError",
    "AllSourcesExhausted",
    "GovernanceBackendError",
    "SourceNotConfiguredError",
    "ConfigError",
    "StreamInterruptedError",
    "GatewayClosedError",
]


def telemetry_schema_sql(backend: str) -> str:
    """The ``llm_calls`` DDL the runtime itself executes (``"postgres"`` or ``"sqlite"``), to
    paste into a migration file: a header, ``CREATE TABLE IF NOT EXISTS`` with every column,
    and the add-column statements. Any other backend raises ``ValueError``."""
    return _native.schema_sql(backend)
