"""The original library's tutorial ("教程:十分钟接入", steps 1–5), unchanged except the base URL,
run against the mock upstream in fresh interpreters with a ``.env`` in their working directory.
Step 4's wrong key is the mock answering 401 (a real gateway's answer to a wrong key)."""

from __future__ import annotations

import sqlite3
import textwrap

from conftest import run_script

# Step 2, "写最小 .env", verbatim but for the base URL.
DOTENV = """\
LLM__MINIMAX__1__BASE_URL={base_url}
LLM__MINIMAX__1__API_KEY=sk-xxx
LLM__MINIMAX__1__MODEL=MiniMax-M3
LLM__MINIMAX__1__TIMEOUT_S=120
LLM_MAX_RETRIES=3
LLM_RETRY_BASE_DELAY=2.0
LLM_RETRY_MAX_DELAY=30.0
LLM_CIRCUIT_BREAKER_THRESHOLD=5
LLM_CIRCUIT_BREAKER_COOLDOWN=60
PGW_LIMITER_BACKEND=memory
PGW_BREAKER_BACKEND=memory
PGW_CACHE_BACKEND=none
PGW_TELEMETRY_BACKEND=none
"""

# Step 3, "第一次调用", verbatim.
FIRST_CALL = '''
import asyncio
from polygateway import GatewayClient

async def main() -> None:
    client = GatewayClient.from_env("LLM")
    try:
        resp = await client.chat([{"role": "user", "content": "你好"}])
        print(resp.content)
        print(f"源={resp.source_name} 耗时={resp.latency_ms}ms tokens={resp.prompt_tokens}+{resp.completion_tokens}")
    finally:
        await client.aclose()

asyncio.run(main())
'''

# Step 4's telemetry lines.
TELEMETRY_ON = """\
PGW_TELEMETRY_BACKEND=sqlite
PGW_TELEMETRY_SQLITE_PATH=logs/telemetry.db
"""

# Step 5, "业务侧只需要认两个异常", verbatim (inside a coroutine with a client and messages).
TWO_EXCEPTIONS = '''
from polygateway import GatewayUnavailableError, RequestRejectedError

try:
    resp = await client.chat(messages)
except GatewayUnavailableError as exc:  # 整个 scope 暂时无源: 延期重投
    print(exc.reason, exc.retry_after_s, exc.per_source_reasons)
except RequestRejectedError:  # 请求本身的问题: 别重试
    raise
'''


def test_tutorial_steps_1_to_5_run_unchanged(tmp_path, mock):
    # Step 1: the package is installed and importable.
    done = run_script("import polygateway; print(polygateway.__version__)", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr

    # Steps 2 and 3: the minimal .env and the first governed call.
    dotenv = DOTENV.format(base_url=mock.base_url)
    (tmp_path / ".env").write_text(dotenv)
    done = run_script(FIRST_CALL, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    content, figures = done.stdout.strip().split("\n")
    assert content == "Hello from the mock upstream."
    assert figures.startswith("源=minimax_1 耗时=") and " tokens=" in figures

    # Step 4: a wrong key gives AllSourcesExhausted, not a bare 401.
    (tmp_path / ".env").write_text(dotenv.replace("API_KEY=sk-xxx", "API_KEY=sk-wrong"))
    mock.set_behaviour("unauthorized")
    done = run_script(FIRST_CALL, cwd=tmp_path)
    assert done.returncode == 1
    assert "polygateway.exceptions.AllSourcesExhausted" in done.stderr, done.stderr
    assert "sk-wrong" not in done.stderr
    # … back to the right key, telemetry on: one row per call in logs/telemetry.db.
    mock.set_behaviour("healthy")
    (tmp_path / ".env").write_text(
        dotenv.replace("PGW_TELEMETRY_BACKEND=none\n", TELEMETRY_ON))
    done = run_script(FIRST_CALL, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = sqlite3.connect(tmp_path / "logs" / "telemetry.db").execute(
        "SELECT call_id, model, latency_ms, error FROM llm_calls").fetchall()
    assert len(rows) == 1 and rows[0][1] == "MiniMax-M3" and rows[0][3] is None

    # Step 5: the two exceptions a caller handles.
    mock.set_behaviour("unauthorized")
    code = (
        "import asyncio\n"
        "from polygateway import GatewayClient\n"
        "async def main():\n"
        "    client = GatewayClient.from_env('LLM')\n"
        "    messages = [{'role': 'user', 'content': 'hi'}]\n"
        + textwrap.indent(TWO_EXCEPTIONS, "    ")
        + "    await client.aclose()\n"
        "asyncio.run(main())\n"
    )
    done = run_script(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reason, retry_after, per_source = done.stdout.strip().split(" ", 2)
    assert reason == "circuit_open" and float(retry_after) > 0
    assert per_source == "{'minimax_1': 'source_dead'}"
