"""The interpreter exits with status 0 — after streamed calls, with calls in flight, with and
without ``aclose()``, and after ``fork`` — each in a fresh interpreter."""

from __future__ import annotations

import pytest

from conftest import run_script

PRELUDE = """
import asyncio, os, sys
from polygateway import GatewayClient
from polygateway.testing import MockUpstream, mock_env
mock = MockUpstream({behaviour!r})
HI = [{{"role": "user", "content": "hi"}}]
"""


def _exits_cleanly(code: str, behaviour: str = "healthy", expect: str = "ok"):
    done = run_script(PRELUDE.format(behaviour=behaviour) + code)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert "Fatal Python error" not in done.stderr and "panicked" not in done.stderr, done.stderr
    assert done.stdout.strip().endswith(expect), done.stdout
    return done


@pytest.mark.parametrize("aclose", [True, False])
def test_exit_after_streamed_calls(aclose):
    _exits_cleanly(f"""
async def main():
    client = GatewayClient.from_settings(mock_env("LLM", mock.base_url))
    replies = await asyncio.gather(*[client.chat(HI, stream=True) for _ in range(50)])
    assert all(r.ttft_ms is not None for r in replies)
    if {aclose}:
        await client.aclose()
    print("ok")
asyncio.run(main())
""")


@pytest.mark.parametrize("aclose", [True, False])
def test_exit_with_calls_in_flight(aclose):
    # The loop stops while 10 calls (within the pacer's initial window) wait on a black hole: they are still running in the runtime
    # when the interpreter exits (the loop is never closed, its tasks never cancelled).
    _exits_cleanly(f"""
loop = asyncio.new_event_loop()
client = GatewayClient.from_settings(mock_env("LLM", mock.base_url))
tasks = [loop.create_task(client.chat(HI)) for _ in range(10)]
async def wait_until_sent():
    while mock.in_flight < 10:
        await asyncio.sleep(0.01)
    if {aclose}:
        await client.aclose()
loop.run_until_complete(wait_until_sent())
print("ok")
""", behaviour="black_hole")


def test_exit_with_calls_in_flight_under_asyncio_run():
    # asyncio.run cancels the pending tasks at the end; the governed calls are dropped.
    _exits_cleanly("""
async def main():
    client = GatewayClient.from_settings(mock_env("LLM", mock.base_url))
    for _ in range(10):
        asyncio.ensure_future(client.chat(HI))
    while mock.in_flight < 10:
        await asyncio.sleep(0.01)
    print("ok")
asyncio.run(main())
""", behaviour="black_hole")


def test_exit_while_a_thread_awaits_a_call():
    # A daemon thread's loop is blocked on a call when the main thread exits.
    _exits_cleanly("""
import threading
client = GatewayClient.from_settings(mock_env("LLM", mock.base_url))
def worker():
    asyncio.run(client.chat(HI))
threading.Thread(target=worker, daemon=True).start()
import time
while mock.in_flight < 1:
    time.sleep(0.01)
print("ok")
""", behaviour="black_hole")


@pytest.mark.parametrize("forks", [1, 20])
def test_fork_child_gets_its_own_runtime(forks):
    # Twenty forks in a row, the parent's runtime threads idle between calls: a parent's thread
    # parked in a process-wide table the child inherits crashed about one child in a hundred
    # before Tokio's `parking_lot` was turned off (tests/fork_safety.rs).
    _exits_cleanly(f"""
async def call(client):
    return (await client.chat(HI)).content

url = mock.base_url  # the mock keeps serving from the parent's runtime
parent = GatewayClient.from_settings(mock_env("LLM", url))
for _ in range({forks}):
    assert asyncio.run(call(parent)) == "Hello from the mock upstream."
    pid = os.fork()
    if pid == 0:
        # The parent's client belongs to the parent's runtime: a clear error, not a hang.
        try:
            asyncio.run(call(parent))
            sys.exit(3)
        except RuntimeError as exc:
            assert "another process" in str(exc), exc
        child = GatewayClient.from_settings(mock_env("LLM", url))
        assert asyncio.run(call(child)) == "Hello from the mock upstream."
        sys.exit(0)  # a normal interpreter exit in the child, hooks and all
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
# The parent keeps working after the forks.
assert asyncio.run(call(parent)) == "Hello from the mock upstream."
print("ok")
""")


def test_exit_without_aclose_still_writes_telemetry(tmp_path):
    db = tmp_path / "t.sqlite"
    _exits_cleanly(f"""
async def main():
    client = GatewayClient.from_settings(mock_env("LLM", mock.base_url,
        PGW_TELEMETRY_BACKEND="sqlite", PGW_TELEMETRY_SQLITE_PATH={str(db)!r}))
    await asyncio.gather(*[client.chat(HI) for _ in range(5)])
    print("ok")
asyncio.run(main())
""")
    import sqlite3

    assert sqlite3.connect(db).execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 5
