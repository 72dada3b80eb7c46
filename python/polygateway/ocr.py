"""``OcrClient``: governed MonkeyOCR calls (text transcription and layout parsing).

Same governance as chat (selection, limits, breaker, retry, telemetry). Only PNG and JPEG are
accepted, checked locally before any quota is spent.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

from ._bridge import submit
from .client import _Client
from .types import (
    OcrElement,
    OcrLayout,
    OcrLayoutElement,
    OcrLayoutResult,
    OcrText,
    OcrTextResult,
)

__all__ = [
    "OcrClient",
    "OcrText",
    "OcrLayout",
    "OcrElement",
    "OcrTextResult",
    "OcrLayoutResult",
    "OcrLayoutElement",
]

Image = Union[bytes, bytearray, memoryview]


class OcrClient(_Client):
    """Governed OCR on one scope (``OCR__MONKEY__1__*`` sources)."""

    _kind = "ocr"
    _default_scope = "OCR"

    async def recognize_text(
        self,
        image: Image,
        *,
        session_id: Optional[str] = None,
        parent_call_id: Optional[str] = None,
        tenant_id: Optional[str] = None,
        meta: Optional[Mapping[str, Any]] = None,
    ) -> OcrText:
        """Transcribe the text of a PNG/JPEG image (``.text``; ``str(result)`` too)."""
        return await self._ocr(image, False, session_id, parent_call_id, tenant_id, meta)

    async def parse_layout(
        self,
        image: Image,
        *,
        session_id: Optional[str] = None,
        parent_call_id: Optional[str] = None,
        tenant_id: Optional[str] = None,
        meta: Optional[Mapping[str, Any]] = None,
    ) -> OcrLayout:
        """Parse the layout: elements with validated ``(x0, y0, x1, y1)`` boxes."""
        return await self._ocr(image, True, session_id, parent_call_id, tenant_id, meta)

    async def check_health(self) -> Dict[str, bool]:
        """Probe every source: ``{"monkey_1": True, ...}``."""
        return await submit(self._native.check_health)

    async def _ocr(self, image, layout, session_id, parent_call_id, tenant_id, meta):
        if not isinstance(image, (bytes, bytearray, memoryview)):
            raise TypeError("image must be bytes (PNG or JPEG file content)")
        return await submit(
            self._native.ocr, bytes(image), layout, session_id, parent_call_id, tenant_id,
            None if meta is None else dict(meta),
        )
