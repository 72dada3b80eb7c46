"""``chat_stream``: deltas in batches, the final response, cancellation by leaving the loop."""

from __future__ import annotations

import asyncio
import gc

import pytest

from polygateway import ChatDelta, GatewayClient, GatewayUnavailableError
from conftest import llm_env, run

HI = [{"role": "user", "content": "hi"}]


def test_stream_yields_the_answer_then_the_response(mock):
    mock.set_behaviour("healthy", content="one two three four five six", chunks=6,
                       inter_token_ms=5)

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        stream = client.chat_stream(HI, tenant_id="acme")
        deltas = [d async for d in stream]
        await client.aclose()
        return deltas, stream.response

    deltas, response = run(scenario())
    assert all(isinstance(d, ChatDelta) for d in deltas)
    assert "".join(d.content for d in deltas) == "one two three four five six"
    assert response.content == "one two three four five six"
    assert 1 <= len(deltas) <= 6


def test_a_slow_consumer_gets_batches(mock):
    mock.set_behaviour("healthy", content="x" * 64, chunks=64)

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        stream = client.chat_stream(HI)
        first = await stream.__anext__()
        await asyncio.sleep(0.2)  # the upstream finishes meanwhile
        rest = [d async for d in stream]
        await client.aclose()
        return first, rest, stream.response

    first, rest, response = run(scenario())
    assert first.content + "".join(d.content for d in rest) == "x" * 64
    assert len(rest) < 63  # everything queued while the consumer slept came in few crossings
    assert response.completion_tokens == 64


def test_reasoning_arrives_as_thinking(mock):
    mock.set_behaviour("reasoning")

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        stream = client.chat_stream(HI)
        deltas = [d async for d in stream]
        await client.aclose()
        return deltas, stream.response

    deltas, response = run(scenario())
    assert "".join(d.thinking for d in deltas) == response.thinking == "Let me think."


def test_leaving_the_loop_cancels_the_call(mock):
    mock.set_behaviour("healthy", content="a b c d", chunks=4, ttft_ms=10, inter_token_ms=2000)

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        async for _ in client.chat_stream(HI):
            break  # the iterator is dropped: the call is cancelled
        gc.collect()
        for _ in range(500):
            if mock.in_flight == 0 and await client.leases_held() == 0:
                break
            await asyncio.sleep(0.01)
        state = (mock.in_flight, await client.leases_held())
        await client.aclose()
        return state

    assert run(scenario()) == (0, 0)


def test_failure_before_the_first_delta_raises_the_call_error(mock):
    mock.set_behaviour("unauthorized")

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        try:
            return [d async for d in client.chat_stream(HI)]
        finally:
            await client.aclose()

    with pytest.raises(GatewayUnavailableError):
        run(scenario())
