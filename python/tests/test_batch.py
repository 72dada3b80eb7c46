"""``client.run_batch(items)``: the runtime's batch job as an async iterator (issue #32 item 6).

Against the runtime's mock upstreams: every item answered once, bad items as results, a journal
that makes a second run replay instead of send, input read as the job needs it, ``stop()``
leaving the rest for the next run, and leaving early cancelling the calls in flight.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from polygateway import BatchProgress, BatchResult, EmbeddingClient, GatewayClient
from polygateway.testing import mock_env
from conftest import llm_env, run


def plain(i: int) -> dict:
    return {"custom_id": f"item-{i}", "messages": [{"role": "user", "content": f"item {i}"}]}


def openai_line(custom_id: str) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "LLM", "messages": [{"role": "user", "content": "hi"}]}}


async def _until(predicate, what: str, polls: int = 500):
    """Poll an eventually-true condition (bounded; not a timing assertion)."""
    for _ in range(polls):
        if predicate():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never happened: {what}")


def test_every_item_is_answered_once_and_a_second_run_replays_the_journal(mock, tmp_path):
    journal = tmp_path / "job.journal"
    items = [plain(i) for i in range(20)] + [openai_line("openai-form"), "not json"]

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        job = client.run_batch(iter(items), journal=journal)
        first = [r async for r in job]
        progress = job.progress()
        again = [r async for r in client.run_batch(iter(items), journal=journal)]
        await client.aclose()
        return first, progress, again

    first, progress, again = run(scenario())
    assert all(isinstance(r, BatchResult) for r in first)
    assert len(first) == 22
    assert sorted(r.custom_id or "" for r in first if r.ok) == sorted(
        [f"item-{i}" for i in range(20)] + ["openai-form"]
    )
    bad = [r for r in first if not r.ok]
    assert [(r.custom_id, r.status_code, r.error_code) for r in bad] == [
        (None, None, "invalid_json")
    ]
    assert bad[0].output()["error"]["code"] == "invalid_json"
    answer = next(r for r in first if r.custom_id == "item-3").output()
    assert answer["custom_id"] == "item-3"
    assert answer["response"]["status_code"] == 200
    assert answer["response"]["body"]["choices"][0]["message"]["content"] == (
        "Hello from the mock upstream."
    )
    assert not any(r.from_journal for r in first)
    assert isinstance(progress, BatchProgress)
    assert (progress.written, progress.succeeded, progress.calls) == (22, 21, 21)
    assert progress.errors == {"invalid_json": 1}
    assert sum(progress.sources.values()) == 21
    # The same items with the same journal: the answers are replayed, nothing is sent.
    assert mock.counts()["chat"] == 21
    assert len(again) == 22
    assert sum(r.from_journal for r in again) == 21
    replayed = {r.custom_id: r.line for r in again if r.from_journal}
    assert replayed == {r.custom_id: r.line for r in first if r.ok}


def test_the_items_are_read_as_the_job_needs_them(mock):
    produced = 0

    async def items():
        nonlocal produced
        for i in range(8000):
            produced += 1
            yield plain(i)

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        ahead = 0
        seen = 0
        async for result in client.run_batch(items(), max_concurrency=8):
            assert result.ok, result.line
            seen += 1
            ahead = max(ahead, produced - seen)
        await client.aclose()
        return seen, ahead

    seen, ahead = run(scenario())
    assert seen == 8000
    # Never the whole input at once: ahead of the consumer are at most the input buffer (1024),
    # the items in flight and their results (8 + 8), the results buffer (1024) and one crossing
    # of results being consumed (≤ 1024).
    assert ahead <= 3 * 1024 + 16 + 1, ahead


def test_stop_leaves_the_rest_for_the_next_run_with_the_same_journal(mock, tmp_path):
    mock.set_behaviour("slow", delay_ms=40)
    journal = tmp_path / "job.journal"
    items = [plain(i) for i in range(40)]

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        job = client.run_batch(items, journal=journal, max_concurrency=4)
        first = []
        async for result in job:
            first.append(result)
            if len(first) == 5:
                job.stop()
        stopped = job.stopped
        rest = [r async for r in client.run_batch(items, journal=journal, max_concurrency=4)]
        await client.aclose()
        return first, stopped, rest

    first, stopped, rest = run(scenario())
    assert stopped
    # The calls in flight at stop() finished and were written; the rest was never sent.
    assert 5 <= len(first) < 40
    assert len(rest) == 40
    assert {r.custom_id for r in rest} == {f"item-{i}" for i in range(40)}
    assert {r.custom_id for r in rest if r.from_journal} == {r.custom_id for r in first}
    # Every item reached the upstream exactly once over both runs.
    assert mock.counts()["chat"] == 40


def test_aclose_cancels_the_calls_in_flight(mock):
    mock.set_behaviour("black_hole")

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        job = client.run_batch([plain(i) for i in range(3)])
        waiting = asyncio.ensure_future(job.__anext__())
        await _until(lambda: mock.in_flight >= 1, "the calls reached the upstream")
        await job.aclose()
        with pytest.raises(StopAsyncIteration):
            await waiting
        await _until(lambda: mock.in_flight == 0, "the upstream requests were closed")
        held = await client.leases_held()
        await client.aclose()
        return held, job.stopped

    held, stopped = run(scenario())
    assert held == 0
    assert stopped


def test_embedding_lines_run_on_an_embedding_client(mock):
    line = {"custom_id": "e1", "method": "POST", "url": "/v1/embeddings",
            "body": {"model": "EMBED", "input": ["a", "b"]}}

    async def scenario():
        client = EmbeddingClient.from_settings(mock_env("EMBED", mock.base_url))
        results = [r async for r in client.run_batch([json.dumps(line)])]
        await client.aclose()
        return results

    (result,) = run(scenario())
    assert result.ok, result.line
    body = result.output()["response"]["body"]
    assert [d["index"] for d in body["data"]] == [0, 1]


def test_bad_arguments_and_items_are_named(mock):
    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        with pytest.raises(ValueError, match="max_concurrency"):
            client.run_batch([], max_concurrency=0)
        with pytest.raises(ValueError, match="max_item_age_s"):
            client.run_batch([], max_item_age_s=float("nan"))
        with pytest.raises(TypeError, match="iterable"):
            client.run_batch(42)
        with pytest.raises(TypeError, match="batch items must be dicts"):
            async for _ in client.run_batch([plain(0), object()]):
                pass
        await client.aclose()

    run(scenario())
