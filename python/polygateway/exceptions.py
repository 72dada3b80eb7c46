"""The exception hierarchy of the original library, raised by every client of this package.

What reaches a caller: the ``GatewayUnavailableError`` family (reschedule after
``retry_after_s``), ``RequestRejectedError`` (fix the request), ``ResultInvalidError`` (the
answer was unusable), ``SourceNotConfiguredError`` / ``ConfigError`` (assembly defects) and
``ValueError`` for a bad ``tenant_id`` / ``meta``. ``TransientError`` and ``SourceDeadError`` are
handled inside the runtime (retry, switch source, open the breaker) and reach callers only as
``AllSourcesExhausted``; they exist so ``except`` clauses written for the original keep importing.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = [
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


class PolyGatewayError(Exception):
    """Base of every error this package raises (entry validation raises ``ValueError``)."""

    def __init__(self, message: str = "", **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        for name, value in attrs.items():
            setattr(self, name, value)
        self._attrs = attrs

    def __reduce__(self):  # keep the attributes across pickling (task queues pickle errors)
        return (_rebuild, (type(self), self.message, self._attrs))


def _rebuild(cls, message, attrs):
    return cls(message, **attrs)


class TransientError(PolyGatewayError):
    """Timeout, 5xx, network error, truncated stream: retried on another source internally."""


class SourceDeadError(PolyGatewayError):
    """401 / 403 / exhausted quota: the source's breaker opens and the call switches source."""


class RequestRejectedError(PolyGatewayError):
    """400 or a local rejection: the request itself is wrong; it was not retried.

    ``body_text`` holds the upstream's (folded, truncated) answer, when there was one.
    """

    body_text: str

    def __init__(self, message: str = "", *, body_text: str = "", **attrs: Any) -> None:
        super().__init__(message, body_text=body_text, **attrs)


class ResultInvalidError(PolyGatewayError):
    """The call succeeded but the answer was unusable (structured output, dimension, OCR ZIP).

    ``raw_text``, ``repair_error`` and ``validation_errors`` describe the last answer.
    """

    raw_text: str
    repair_error: Optional[str]
    validation_errors: List[str]

    def __init__(
        self,
        message: str = "",
        *,
        raw_text: str = "",
        repair_error: Optional[str] = None,
        validation_errors: Optional[List[str]] = None,
        **attrs: Any,
    ) -> None:
        super().__init__(
            message,
            raw_text=raw_text,
            repair_error=repair_error,
            validation_errors=list(validation_errors or []),
            **attrs,
        )


class GatewayUnavailableError(PolyGatewayError):
    """The whole scope cannot serve now: reschedule the job after ``retry_after_s`` seconds.

    ``reason`` is one of ``circuit_open``, ``retry_exhausted``, ``stalled``, ``quota_exhausted``,
    ``no_sources``, ``governance_backend_down``, ``deadline_exceeded`` (the call's ``deadline_s``
    passed while it waited; it was never sent) and ``budget_exhausted`` (a spend budget has no room
    for the call; ``retry_after_s`` is when its window resets); ``per_source_reasons`` maps each
    source to why it could not serve.
    """

    scope: str
    reason: str
    retry_after_s: float
    per_source_reasons: Dict[str, str]

    def __init__(
        self,
        message: str = "",
        *,
        scope: str = "",
        reason: str = "",
        retry_after_s: float = 0.0,
        per_source_reasons: Optional[Dict[str, str]] = None,
        detail: str = "",
        **attrs: Any,
    ) -> None:
        super().__init__(
            message,
            scope=scope,
            reason=reason,
            retry_after_s=float(retry_after_s),
            per_source_reasons=dict(per_source_reasons or {}),
            detail=detail,
            **attrs,
        )


class CircuitOpenError(GatewayUnavailableError):
    """Every source's breaker is open (``{SCOPE}__CIRCUIT_OPEN=fail_fast``) and the call was
    refused at the gate before any attempt of its own. A call whose own attempts opened the
    breakers raises ``AllSourcesExhausted`` instead, so a caller's retry loop meets this one on
    its next try: catch ``GatewayUnavailableError``, the whole family, to reschedule."""


class AllSourcesExhausted(GatewayUnavailableError):
    """The retry budget, the stall window, the call's deadline or a spend budget ran out;
    transient and dead sources end here."""


class GovernanceBackendError(GatewayUnavailableError):
    """The limiter or breaker backend (e.g. Redis) is down: calls fail closed, retry in 5 s."""


class SourceNotConfiguredError(PolyGatewayError):
    """A scope or source that is not configured: an assembly defect, not a reschedule."""


class ConfigError(PolyGatewayError, ValueError):
    """The configuration is invalid; the message names the key and what is allowed."""


class StreamInterruptedError(TransientError):
    """A stream failed after deltas were delivered (``delivered`` counts them)."""


class GatewayClosedError(PolyGatewayError, RuntimeError):
    """The client was closed with ``aclose()``."""


def _from_native(class_name: str, message: str, attrs: Dict[str, Any]) -> BaseException:
    """The exception instance for a runtime error (called by the extension module)."""
    if class_name == "ValueError":
        return ValueError(message)
    cls = globals().get(class_name)
    if not (isinstance(cls, type) and issubclass(cls, PolyGatewayError)):
        cls = PolyGatewayError
    return cls(message, **attrs)
