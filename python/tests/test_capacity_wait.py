"""Time spent waiting for capacity reaches Python's answers (``capacity_wait_ms``, issue #37)."""

from __future__ import annotations

import asyncio

from polygateway import GatewayClient
from conftest import llm_env, run


def test_calls_queued_for_a_pacer_slot_report_their_wait(mock):
    mock.set_behaviour("slow", delay_ms=50)
    # One pacer slot that never grows: calls in flight together queue for it.
    env = llm_env(mock.base_url, LLM__PACER__START="1", LLM__PACER__CEILING="1")

    async def scenario():
        client = GatewayClient.from_settings(env)
        try:
            alone = await client.chat([{"role": "user", "content": "alone"}])
            queued = await asyncio.gather(
                *(client.chat([{"role": "user", "content": f"queued {i}"}]) for i in range(4))
            )
            return alone, queued
        finally:
            await client.aclose()

    alone, queued = run(scenario())
    assert alone.capacity_wait_ms == 0.0
    assert any(r.capacity_wait_ms > 0.0 for r in queued), [r.capacity_wait_ms for r in queued]
