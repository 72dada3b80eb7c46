"""The last differences from the original library (issue #51), each as the original documents it:

- a client built while its governance Redis is down raises ``GovernanceBackendError`` (retry in
  5 s) at each call and serves by itself once Redis is there;
- ``QUOTA_FULL=fail_fast`` fails a call at once on a source's own concurrency, RPM and TPM limits;
- breakers opened by a call's own attempts end it ``AllSourcesExhausted``; the next call, refused
  at the gate, is ``CircuitOpenError`` — a downstream retry loop names ``GatewayUnavailableError``;
- ``LLMResponse``: ``latency_ms`` is an ``int``, the original's fields come first in its order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import socket
import subprocess
import time

import pytest

from polygateway import (
    AllSourcesExhausted,
    CircuitOpenError,
    GatewayClient,
    GatewayUnavailableError,
    GovernanceBackendError,
    LLMResponse,
    TransientError,
)
from conftest import CI, llm_env, run

HI = [{"role": "user", "content": "hi"}]


# --- LLMResponse -----------------------------------------------------------------------------

ORIGINAL_FIELDS = [
    # The eleven the original's predecessors consumed, in their order …
    "content", "thinking", "model", "provider", "prompt_tokens", "completion_tokens",
    "latency_ms", "ttft_ms", "max_inter_token_ms", "cache_hit", "call_id",
    # … then the original's own additions.
    "source_name", "cost", "usage_source", "structured_data", "cached_prompt_tokens",
    "model_reported",
]


def test_the_original_fields_come_first_in_its_order():
    names = [f.name for f in dataclasses.fields(LLMResponse)]
    assert names[: len(ORIGINAL_FIELDS)] == ORIGINAL_FIELDS
    # Positional construction as the original's tests write it.
    r = LLMResponse("text", "", "m", "openai", 3, 5, 120, None, None, False, "cid")
    assert (r.prompt_tokens, r.completion_tokens, r.latency_ms, r.call_id) == (3, 5, 120, "cid")
    content, thinking, model, provider, pt, ct, latency, ttft, gap, hit, call_id = (
        dataclasses.astuple(r)[:11]
    )
    assert (content, model, pt, ct, latency, hit, call_id) == ("text", "m", 3, 5, 120, False, "cid")


def test_an_answer_carries_latency_as_whole_milliseconds(mock):
    mock.set_behaviour("slow", delay_ms=30)

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        try:
            return await client.chat(HI), await client.chat(HI, stream=False)
        finally:
            await client.aclose()

    for resp in run(scenario()):
        assert type(resp.latency_ms) is int
        assert resp.latency_ms >= 30
        fields = dataclasses.astuple(resp)
        assert fields[6] == resp.latency_ms and fields[10] == resp.call_id
        assert fields[11] == resp.source_name == "openai_1"


# --- QUOTA_FULL=fail_fast on a source's own limits -------------------------------------------


def _three_at_once(env):
    """Three concurrent calls; each one's result (answer or exception) and seconds taken."""

    async def one(client):
        started = time.monotonic()
        try:
            result = await client.chat(HI)
        except Exception as exc:  # noqa: BLE001 - the test inspects what was raised
            result = exc
        return result, time.monotonic() - started

    async def scenario():
        client = GatewayClient.from_settings(env)
        try:
            return await asyncio.gather(one(client), one(client), one(client))
        finally:
            await client.aclose()

    return run(scenario())


def _quota_failures(results):
    ok = [r for r, _ in results if not isinstance(r, Exception)]
    failed = [(r, took) for r, took in results if isinstance(r, Exception)]
    for exc, took in failed:
        assert type(exc) is AllSourcesExhausted, repr(exc)
        assert exc.reason == "quota_exhausted"
        assert took < 0.6, f"a fail-fast call waited {took:.2f} s"
    return ok, failed


def test_fail_fast_on_a_sources_own_concurrency(mock):
    mock.set_behaviour("slow", delay_ms=1500)
    env = llm_env(mock.base_url, LLM__QUOTA_FULL="fail_fast", LLM__OPENAI__1__MAX_CONCURRENCY=1)
    ok, failed = _quota_failures(_three_at_once(env))
    assert (len(ok), len(failed)) == (1, 2)
    assert mock.counts()["chat"] == 1
    for exc, _ in failed:
        assert 0 < exc.retry_after_s <= 1


def test_waiting_on_a_sources_own_concurrency_is_still_the_default(mock):
    mock.set_behaviour("slow", delay_ms=300)
    env = llm_env(mock.base_url, LLM__OPENAI__1__MAX_CONCURRENCY=1)
    results = _three_at_once(env)
    assert all(not isinstance(r, Exception) for r, _ in results)
    assert max(took for _, took in results) >= 0.85  # they took turns: 3 × 300 ms
    assert mock.counts()["chat"] == 3


def test_fail_fast_on_a_sources_own_rpm(mock):
    mock.set_behaviour("slow", delay_ms=500)
    env = llm_env(mock.base_url, LLM__QUOTA_FULL="fail_fast", LLM__OPENAI__1__RPM=1)
    ok, failed = _quota_failures(_three_at_once(env))
    assert (len(ok), len(failed)) == (1, 2)
    assert mock.counts()["chat"] == 1
    for exc, _ in failed:
        assert exc.retry_after_s > 1  # the minute window's end, not "now"


def test_fail_fast_on_a_sources_own_tpm(mock):
    # Slow answers: the first call's estimate is still reserved when the others ask.
    mock.set_behaviour("slow", delay_ms=500)
    env = llm_env(mock.base_url, LLM__QUOTA_FULL="fail_fast", LLM__OPENAI__1__TPM=1000,
                  LLM__OPENAI__1__EST_TOKENS=600)
    ok, failed = _quota_failures(_three_at_once(env))
    assert (len(ok), len(failed)) == (1, 2)
    assert mock.counts()["chat"] == 1


# --- the scope-unavailable family as a downstream retry loop sees it --------------------------


def test_breakers_opened_by_the_calls_own_retries_end_it_all_sources_exhausted(mock):
    # Two failures open the only breaker; the third attempt is refused at the gate — the
    # original raises AllSourcesExhausted here (the call used up its sources), and so does this.
    mock.set_behaviour("server_error", status=503)
    env = llm_env(mock.base_url, LLM__RETRY__MAX_ATTEMPTS=3, LLM__BREAKER__FAIL_THRESHOLD=2,
                  LLM__RETRY__BACKOFF_BASE_S=0.01, LLM__RETRY__BACKOFF_MAX_S=0.02)
    with pytest.raises(AllSourcesExhausted) as info:
        run(_chat_once(env))
    assert info.value.reason == "circuit_open"
    assert info.value.retry_after_s > 0
    assert mock.counts()["chat"] == 2


async def _chat_once(env):
    client = GatewayClient.from_settings(env)
    try:
        return await client.chat(HI)
    finally:
        await client.aclose()


def test_a_downstream_retry_loop_sees_circuit_open_on_its_second_failure(mock):
    """A worker's step-level retry: the first failure is AllSourcesExhausted (the call's own 401
    opened the breaker), the second CircuitOpenError (refused at the gate, nothing sent). Only
    ``except (TransientError, GatewayUnavailableError)`` keeps such a loop retrying."""
    mock.set_behaviour("unauthorized")

    async def worker():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        seen = []
        try:
            for _ in range(3):
                try:
                    await client.chat(HI)
                except (TransientError, GatewayUnavailableError) as exc:
                    seen.append(exc)
        finally:
            await client.aclose()
        return seen

    first, second, third = run(worker())
    assert type(first) is AllSourcesExhausted
    assert type(second) is CircuitOpenError and type(third) is CircuitOpenError
    # What the original's migration guide wrote, (TransientError, AllSourcesExhausted), would
    # have let the second one escape the loop.
    assert not isinstance(second, (TransientError, AllSourcesExhausted))
    assert all(e.reason == "circuit_open" and e.retry_after_s > 0 for e in (first, second))
    assert mock.counts()["chat"] == 1


# --- Redis down at start ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_server(port: int) -> subprocess.Popen:
    return subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def test_a_client_built_while_redis_is_down_fails_closed_then_serves_by_itself(mock):
    if shutil.which("redis-server") is None:
        if CI:
            pytest.fail("redis-server is needed under CI=true")
        pytest.skip("LOUD SKIP: no redis-server binary to start a private server")
    port = _free_port()
    env = llm_env(mock.base_url, PGW_LIMITER_BACKEND="redis", PGW_BREAKER_BACKEND="redis",
                  REDIS_URL=f"redis://127.0.0.1:{port}")

    async def scenario():
        started = time.monotonic()
        client = GatewayClient.from_settings(env)  # nothing listens on the port yet
        assert time.monotonic() - started < 4
        server = None
        try:
            for _ in range(3):
                began = time.monotonic()
                with pytest.raises(GovernanceBackendError) as info:
                    await client.chat(HI)
                assert time.monotonic() - began < 1, "a call while Redis is down fails at once"
                exc = info.value
                assert (exc.reason, exc.retry_after_s) == ("governance_backend_down", 5.0)
                assert isinstance(exc, GatewayUnavailableError)
            assert mock.counts()["chat"] == 0, "nothing went upstream ungoverned"

            server = _redis_server(port)
            back = time.monotonic()
            # Within one retry interval (retry_after_s = 5) of Redis coming back, the same
            # client serves: a caller that reschedules as told is served on its next try.
            while True:
                try:
                    resp = await client.chat(HI)
                    break
                except GovernanceBackendError:
                    assert time.monotonic() - back < 5, "not serving 5 s after Redis came back"
                    await asyncio.sleep(0.1)
            assert resp.content
            for _ in range(3):
                await client.chat(HI)
            return time.monotonic() - back
        finally:
            await client.aclose()
            if server is not None:
                server.kill()
                server.wait(timeout=10)

    recovered = run(scenario())
    assert recovered < 5
    assert mock.counts()["chat"] == 4
