"""The original library's documentation snippets, unchanged except the base URL, run against the
mock upstreams in a fresh interpreter with a ``.env`` in its working directory."""

from __future__ import annotations

import textwrap

from conftest import run_script

# The original quick start's `.env`, with the mock's base URL (and the OCR / EMBED sources its
# third snippet needs).
DOTENV = """\
LLM__MINIMAX__1__BASE_URL={llm}
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
OCR__MONKEY__1__BASE_URL={ocr}
OCR__MONKEY__1__API_KEY=none
OCR__MONKEY__1__MODEL=monkeyocr
OCR__MONKEY__1__TIMEOUT_S=60
EMBED__OPENAI__1__BASE_URL={llm}
EMBED__OPENAI__1__API_KEY=sk-xxx
EMBED__OPENAI__1__MODEL=text-embedding-3-small
EMBED__OPENAI__1__TIMEOUT_S=60
EMBED__BATCH_SIZE=16
"""

# "2. 发起治理调用", verbatim.
QUICK_START = '''
from polygateway import GatewayClient

async def main() -> None:
    client = GatewayClient.from_env("LLM")   # 读 .env 装配整套治理栈
    try:
        resp = await client.chat([{"role": "user", "content": "你好"}])
        print(resp.content, resp.source_name, resp.latency_ms)
    finally:
        await client.aclose()                # 归还连接与治理后端资源
'''

# "3. OCR 与 Embedding", verbatim (inside a coroutine, with a PNG to read).
OCR_AND_EMBEDDING = '''
from polygateway import EmbeddingClient
from polygateway.ocr import OcrClient

ocr = OcrClient.from_env("OCR")            # OCR__MONKEY__1__* 多源
text = await ocr.recognize_text(image_bytes)          # 文本转录
layout = await ocr.parse_layout(image_bytes)          # 版面解析(带 bbox 的元素列表)
health = await ocr.check_health()                     # 逐源预检 {"monkey_1": True, ...}

embed = EmbeddingClient.from_env("EMBED")  # EMBED__*__* + EMBED__BATCH_SIZE
vectors = (await embed.embed(["文本 a", "文本 b"])).vectors
'''

# "4. 业务侧异常处理" and "5. 多租户与自定义维度", verbatim.
ERRORS = '''
from polygateway import GatewayUnavailableError, RequestRejectedError

try:
    resp = await client.chat(messages)
except GatewayUnavailableError as exc:
    # 整个 scope 暂时无源可用: 延期重投,不消耗业务失败预算
    schedule_retry(after_s=exc.retry_after_s)   # exc.reason / exc.per_source_reasons 供诊断
except RequestRejectedError:
    ...  # 请求本身有问题(400/格式拒绝): 不重试,直接失败
'''
TENANT = '''
resp = await client.chat(
    messages,
    tenant_id="acme-corp",                           # 遥测表的真实列,可挂 RLS
    meta={"batch_id": "b-42", "stage": "extract"},   # 任意自定义 KV,进 meta 列
)
'''


def _dotenv(tmp_path, mock, ocr_mock):
    (tmp_path / ".env").write_text(DOTENV.format(llm=mock.base_url, ocr=ocr_mock.base_url))


def test_quick_start_runs_unchanged(tmp_path, mock, ocr_mock):
    _dotenv(tmp_path, mock, ocr_mock)
    done = run_script(QUICK_START + "\nimport asyncio\nasyncio.run(main())\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    content, source, latency = done.stdout.rsplit(" ", 2)
    assert content == "Hello from the mock upstream."
    assert source == "minimax_1"
    assert float(latency) > 0
    assert mock.counts()["chat"] == 1


def test_ocr_and_embedding_snippet_runs_unchanged(tmp_path, mock, ocr_mock):
    _dotenv(tmp_path, mock, ocr_mock)
    code = (
        "import asyncio\n"
        "image_bytes = b'\\x89PNG\\r\\n\\x1a\\n a scanned page'\n"
        "async def main():\n"
        + textwrap.indent(OCR_AND_EMBEDDING, "    ")
        + "    print(repr(str(text)), len(layout), health, len(vectors), len(vectors[0]))\n"
        "asyncio.run(main())\n"
    )
    done = run_script(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "{'monkey_1': True}" in done.stdout
    assert done.stdout.strip().endswith("2 8")  # two vectors of the mock's dimension 8
    assert ocr_mock.total_requests() >= 2


def test_error_and_tenant_snippets_run_unchanged(tmp_path, mock, ocr_mock):
    _dotenv(tmp_path, mock, ocr_mock)
    code = (
        "import asyncio\n"
        "from polygateway import GatewayClient\n"
        "scheduled = []\n"
        "def schedule_retry(after_s): scheduled.append(after_s)\n"
        "async def main():\n"
        "    client = GatewayClient.from_env('LLM')\n"
        "    messages = [{'role': 'user', 'content': 'hi'}]\n"
        + textwrap.indent(ERRORS, "    ")
        + textwrap.indent(TENANT, "    ")
        + "    print(resp.content, scheduled)\n"
        "    await client.aclose()\n"
        "asyncio.run(main())\n"
    )
    done = run_script(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello from the mock upstream. []"


def test_telemetry_schema_sql_snippet(tmp_path):
    done = run_script(
        "import polygateway; print(polygateway.telemetry_schema_sql('postgres'))", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "CREATE TABLE IF NOT EXISTS llm_calls" in done.stdout
    assert "ADD COLUMN IF NOT EXISTS" in done.stdout
    bad = run_script("import polygateway; polygateway.telemetry_schema_sql('mysql')", cwd=tmp_path)
    assert bad.returncode == 1 and "ValueError" in bad.stderr and "mysql" in bad.stderr
