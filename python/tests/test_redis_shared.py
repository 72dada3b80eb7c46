"""Redis-backed governance shared between a Python process and a Rust process (the operator
CLI): a breaker opened from Python refuses the Rust process's call, and a concurrency slot held
by the Rust process refuses Python's. Real Redis, real Lua; no timing assertions."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from polygateway import AllSourcesExhausted, GatewayClient, GatewayUnavailableError
from polygateway.testing import mock_env
from conftest import run
from test_telemetry import rust_cli

HI = [{"role": "user", "content": "hi"}]


def _env(scope, base_url, redis_url, **extra):
    return mock_env(scope, base_url, PGW_LIMITER_BACKEND="redis", PGW_BREAKER_BACKEND="redis",
                    REDIS_URL=redis_url, **extra)


def _rust(env, scope, **popen):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LLM", "PGW_", "REDIS"))}
    clean.update(env)
    return subprocess.Popen([str(rust_cli()), "chat", "hi", "--scope", scope], env=clean,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


async def _python_chat(env, scope):
    client = GatewayClient.from_settings(env, scope=scope)
    try:
        return await client.chat(HI)
    finally:
        await client.aclose()


def test_breaker_opened_from_python_refuses_the_rust_process(mock, redis_url, unique_scope):
    mock.set_behaviour("unauthorized")
    env = _env(unique_scope, mock.base_url, redis_url)
    with pytest.raises(AllSourcesExhausted):  # its own 401 opened the shared breaker
        run(_python_chat(env, unique_scope))
    assert mock.counts()["chat"] == 1
    out, err = _rust(env, unique_scope).communicate(timeout=60)
    assert "circuit_open" in err, (out, err)
    assert mock.counts()["chat"] == 1  # the Rust process sent nothing: the breaker is shared


def test_slot_held_by_the_rust_process_refuses_python(mock, redis_url, unique_scope):
    mock.set_behaviour("slow", delay_ms=1500)
    env = _env(unique_scope, mock.base_url, redis_url,
               **{f"{unique_scope}__OPENAI__1__MAX_CONCURRENCY": "1",
                  f"{unique_scope}__QUOTA_FULL": "fail_fast"})
    rust = _rust(env, unique_scope)

    async def while_rust_holds_the_slot():
        for _ in range(3000):
            if mock.in_flight == 1:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the Rust process never reached the upstream")
        with pytest.raises(GatewayUnavailableError) as info:
            await _python_chat(env, unique_scope)
        return info.value

    refused = run(while_rust_holds_the_slot())
    assert refused.reason == "quota_exhausted", refused
    assert mock.counts()["chat"] == 1  # Python's call never reached the upstream
    out, err = rust.communicate(timeout=60)
    assert rust.returncode == 0, err
    # The slot is free again: Python is served now.
    mock.set_behaviour("healthy")
    assert run(_python_chat(env, unique_scope)).content == "Hello from the mock upstream."
