"""Cancelling the awaiting asyncio task cancels the governed call: the upstream request is
closed and every permit and lease is released."""

from __future__ import annotations

import asyncio

import pytest

from polygateway import GatewayClient
from conftest import llm_env, run

HI = [{"role": "user", "content": "hi"}]


async def _until(predicate, what: str, polls: int = 500):
    """Poll an eventually-true condition (bounded; not a timing assertion)."""
    for _ in range(polls):
        if predicate():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never happened: {what}")


@pytest.mark.parametrize("stream", [True, False])
def test_cancel_releases_the_upstream_request_and_permits(mock, stream):
    mock.set_behaviour("black_hole")

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url, LLM__OPENAI__1__MAX_CONCURRENCY=1))
        task = asyncio.ensure_future(client.chat(HI, stream=stream))
        await _until(lambda: mock.in_flight == 1, "the call reached the upstream")
        assert await client.leases_held() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(lambda: mock.in_flight == 0, "the upstream request was closed")
        assert await client.leases_held() == 0
        # The permit is back: with MAX_CONCURRENCY=1 a new call is admitted and served.
        mock.set_behaviour("healthy")
        reply = await client.chat(HI)
        await client.aclose()
        return reply

    assert run(scenario()).content == "Hello from the mock upstream."


def test_wait_for_timeout_cancels_the_call(mock):
    mock.set_behaviour("black_hole")

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.chat(HI), timeout=0.3)
        await _until(lambda: mock.in_flight == 0, "the upstream request was closed")
        held = await client.leases_held()
        await client.aclose()
        return held

    assert run(scenario()) == 0


def test_many_concurrent_calls_resolve_on_their_own_loop(mock):
    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        replies = await asyncio.gather(
            *[client.chat([{"role": "user", "content": f"q{i}"}]) for i in range(300)]
        )
        await client.aclose()
        return replies

    replies = run(scenario())
    assert len({r.call_id for r in replies}) == 300
    assert all(r.content == "Hello from the mock upstream." for r in replies)
