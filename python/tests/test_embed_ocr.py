"""``EmbeddingClient`` and ``polygateway.ocr.OcrClient`` through the governed path."""

from __future__ import annotations

import pytest

from polygateway import EmbeddingClient, RequestRejectedError
from polygateway.ocr import OcrClient, OcrElement, OcrLayout, OcrText
from polygateway.testing import mock_env
from conftest import run

PNG = b"\x89PNG\r\n\x1a\n a scanned page"


def test_embed_batches_and_keeps_order(mock):
    async def scenario():
        client = EmbeddingClient.from_settings(
            mock_env("EMBED", mock.base_url, EMBED__BATCH_SIZE=2)
        )
        out = await client.embed([f"text {i}" for i in range(5)], tenant_id="acme")
        await client.aclose()
        return out

    out = run(scenario())
    assert len(out.vectors) == 5 and out.dim == 8
    assert all(len(v) == 8 for v in out.vectors)
    assert mock.counts()["embeddings"] == 3  # batches of 2, 2, 1
    assert out.source_name == "openai_1"


def test_ocr_text_layout_and_health(ocr_mock):
    async def scenario():
        client = OcrClient.from_settings(mock_env("OCR", ocr_mock.base_url))
        text = await client.recognize_text(PNG)
        layout = await client.parse_layout(bytearray(PNG))
        health = await client.check_health()
        await client.aclose()
        return text, layout, health

    text, layout, health = run(scenario())
    assert isinstance(text, OcrText) and str(text) == text.text and text.text
    assert isinstance(layout, OcrLayout) and len(layout) > 0
    assert all(isinstance(e, OcrElement) and len(e.bbox) == 4 for e in layout)
    assert health == {"monkey_1": True}


def test_ocr_refuses_other_formats_locally(ocr_mock):
    async def scenario():
        client = OcrClient.from_settings(mock_env("OCR", ocr_mock.base_url))
        try:
            await client.recognize_text(b"GIF89a not a png")
        finally:
            await client.aclose()

    with pytest.raises(RequestRejectedError):
        run(scenario())
    assert ocr_mock.total_requests() == 0
    with pytest.raises(TypeError):
        run(OcrClient.from_settings(mock_env("OCR", ocr_mock.base_url)).recognize_text("a path"))


def test_a_client_of_the_wrong_kind_is_refused(mock):
    from polygateway import SourceNotConfiguredError

    with pytest.raises(SourceNotConfiguredError) as info:
        EmbeddingClient.from_settings(mock_env("LLM", mock.base_url), scope="LLM")
    assert "not a embedding scope" in str(info.value) or "embedding" in str(info.value)
