"""The answers: frozen dataclasses with the original library's field names and order.

``LLMResponse`` keeps the original's seventeen fields first, in its order (the eleven its
predecessors consumed — ``content`` … ``call_id`` — then ``source_name``, ``cost``,
``usage_source``, ``structured_data``, ``cached_prompt_tokens``, ``model_reported``), so positional
construction, unpacking and ``dataclasses.astuple`` keep working; ``latency_ms`` is whole
milliseconds (an ``int``) as there. This runtime's additions follow, all with defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

__all__ = [
    "LLMResponse",
    "ChatDelta",
    "ToolCall",
    "ToolCallDelta",
    "EmbeddingResponse",
    "TelemetryStatus",
    "OcrText",
    "OcrElement",
    "OcrLayout",
    "OcrTextResult",
    "OcrLayoutResult",
    "OcrLayoutElement",
    "BatchResult",
    "BatchProgress",
]


@dataclass(frozen=True)
class LLMResponse:
    """One chat answer.

    ``structured_data`` is the validated pydantic instance for ``structured=Model``, the repaired
    JSON value for ``structured="json"``, else ``None``. ``cost`` is the whole call's cost from
    the pricing table (``PGW_PRICING_PATH``), ``None`` without one.
    """

    # The original library's fields, in its order: the eleven its predecessors consumed
    # (positional construction and tuple-unpacking rely on them), then its own additions.
    content: str
    thinking: str = ""
    model: str = ""
    provider: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: int = 0
    ttft_ms: Optional[float] = None
    max_inter_token_ms: Optional[float] = None
    cache_hit: bool = False
    call_id: str = ""
    source_name: str = ""
    cost: Optional[float] = None
    usage_source: str = "estimated"
    structured_data: Any = None
    cached_prompt_tokens: Optional[int] = None
    model_reported: Optional[str] = None
    # This runtime's additions.
    reasoning_tokens: Optional[int] = None
    truncated: bool = False
    asks: int = 1
    parent_call_id: Optional[str] = None
    last_ask_cost: Optional[float] = None
    # The chat protocol: tool calls (arguments are the exact string the model produced), why the
    # model stopped, a refusal, logprobs when asked for, the choices after the first when n > 1.
    tool_calls: Tuple["ToolCall", ...] = ()
    finish_reason: Optional[str] = None
    refusal: Optional[str] = None
    logprobs: Any = None
    system_fingerprint: Optional[str] = None
    other_choices: Tuple[Dict[str, Any], ...] = ()
    # Time the call waited for capacity (pacer slot, quota gate, cooldown, 429 pushback), over
    # every ask; not part of latency_ms. 0 on a cache hit.
    capacity_wait_ms: float = 0.0
    # The call's own id: every telemetry row of this call (attempts, re-asks, a cache hit)
    # carries it as ``call_group_id``; ``parent_call_id`` is the caller's chain link, as in the
    # original library (``None`` when none was given).
    call_group_id: Optional[str] = None
    # Native dialects (Anthropic, Gemini): the thinking as blocks with their signatures
    # (``{"type": "thinking", "thinking", "signature"}`` or ``{"type": "redacted_thinking",
    # "data"}``), which a tool loop sends back unchanged (``to_message()``), and the prompt tokens
    # written to the provider's prompt cache by lifetime (``cached_prompt_tokens`` are the reads).
    thinking_blocks: Tuple[Dict[str, Any], ...] = ()
    cache_write_5m_tokens: Optional[int] = None
    cache_write_1h_tokens: Optional[int] = None

    def to_message(self) -> Dict[str, Any]:
        """The assistant turn this answer makes in a conversation, as a message dict: its text
        (``None`` when it only called tools), its tool calls, its refusal and its thinking blocks
        with their signatures. A tool loop appends it before the tool results, and the same loop
        runs on OpenAI-compatible, Anthropic and Gemini sources (OpenAI chat leaves the thinking
        blocks out)."""
        message: Dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            if not self.content:
                message["content"] = None
            message["tool_calls"] = [
                {"id": c.id, "type": c.type, "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.refusal:
            message["refusal"] = self.refusal
        if self.thinking_blocks:
            message["thinking_blocks"] = [dict(b) for b in self.thinking_blocks]
        return message


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an answer, OpenAI's ``{"id", "type", "function": {"name", "arguments"}}``
    flattened; ``arguments`` is the model's exact string (not parsed: it may not be JSON)."""

    id: str
    type: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call as it streamed: pieces of one call share ``index``; the first one
    carries ``id`` and ``name``, the others more of ``arguments``."""

    index: int
    id: Optional[str]
    name: Optional[str]
    arguments: str


@dataclass(frozen=True)
class ChatDelta:
    """Text that arrived on a stream since the previous item (every delta already queued is
    joined into one item, so a slow consumer is not charged per delta)."""

    content: str
    thinking: str = ""
    tool_calls: Tuple[ToolCallDelta, ...] = ()
    refusal: str = ""


@dataclass(frozen=True)
class EmbeddingResponse:
    """One embeddings call: one vector per input text, in input order."""

    vectors: List[List[float]]
    dim: int
    model: str = ""
    provider: str = ""
    source_name: str = ""
    prompt_tokens: int = 0
    usage_source: str = "estimated"
    latency_ms: float = 0.0
    call_id: str = ""
    # The longest wait for capacity of any batch (batches run concurrently).
    capacity_wait_ms: float = 0.0
    cost: Optional[float] = None
    """The call's cost from the pricing table (``PGW_PRICING_PATH``): every batch priced at the
    model's input price. ``None`` without a table, without a price for the model, or when the
    upstream reported no usage."""


@dataclass(frozen=True)
class TelemetryStatus:
    """Read-only snapshot of the telemetry writer.

    Reconcile on both ``degraded`` and ``dropped_rows``: rows dropped because the writer was
    saturated leave ``degraded`` false.
    """

    degraded: bool
    fatal: bool
    reason: Optional[str]
    degraded_for_s: float
    dropped_rows: int
    retry_after_s: float


@dataclass(frozen=True)
class OcrText:
    """Text transcription of one image (``str(result)`` is the text)."""

    text: str
    source_name: str
    latency_ms: float
    call_id: str
    usage: int = 0
    raw: Any = None
    capacity_wait_ms: float = 0.0

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class OcrElement:
    """One layout element (the original's ``OcrLayoutElement``): its ``type`` (an open string:
    ``text``, ``title``, ``table``, …), ``(x1, y1, x2, y2)`` box in page coordinates, page and
    text. ``kind`` is an alias of ``type``."""

    type: str
    bbox: Tuple[float, float, float, float]
    page_index: int
    text: str

    @property
    def kind(self) -> str:
        """Alias of ``type`` (this package's earlier name)."""
        return self.type


@dataclass(frozen=True)
class OcrLayout:
    """Layout of one image: the elements with validated boxes (iterable like a list)."""

    elements: List[OcrElement]
    page_sizes: List[Tuple[float, float]] = field(default_factory=list)
    source_name: str = ""
    latency_ms: float = 0.0
    call_id: str = ""
    usage: int = 0
    raw: Any = None
    capacity_wait_ms: float = 0.0

    def __iter__(self) -> Iterator[OcrElement]:
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __getitem__(self, index: int) -> OcrElement:
        return self.elements[index]


# The original library's names of the OCR answers.
OcrTextResult = OcrText
OcrLayoutResult = OcrLayout
OcrLayoutElement = OcrElement


@dataclass(frozen=True)
class BatchResult:
    """One result of ``run_batch``: the output line of one input item (OpenAI's Batch API
    output format).

    ``status_code`` is ``None`` (and ``error_code`` set: ``invalid_json``,
    ``missing_custom_id``, ``duplicate_custom_id``, ``invalid_url``, ``invalid_body``,
    ``model_not_found``, ``journal_mismatch``) when the item never became a call; a failed call
    has its HTTP status and the gateway error's code (``request_rejected``,
    ``retry_exhausted``, …). ``from_journal``: answered by an earlier run with the same journal,
    not sent now.
    """

    custom_id: Optional[str]
    line: str
    status_code: Optional[int]
    error_code: Optional[str]
    cost: float
    latency_ms: Optional[float]
    from_journal: bool

    @property
    def ok(self) -> bool:
        """Answered with status 200."""
        return self.status_code == 200

    def output(self) -> Dict[str, Any]:
        """The output line as a dict (``custom_id``, ``response``, ``error``)."""
        return json.loads(self.line)


@dataclass(frozen=True)
class BatchProgress:
    """What a running ``run_batch`` job has done so far (``BatchRun.progress()``)."""

    read: int
    input_done: bool
    written: int
    succeeded: int
    from_journal: int
    in_flight: int
    waiting_retry: int
    rescheduled: int
    calls: int
    errors: Dict[str, int]
    sources: Dict[str, int]
    cost: float
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    elapsed_s: float
