"""Telemetry from Python: the rows the runtime writes for a Python call are the rows the Rust
runtime writes for the same call (the operator CLI, a Rust process), in SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from polygateway import GatewayClient, telemetry_schema_sql
from conftest import CI, llm_env, run

# Per call, these differ between any two calls; every other column must match.
PER_CALL = {"call_id", "call_group_id", "latency_ms", "ttft_ms", "max_inter_token_ms",
            "created_at"}


def rust_cli() -> Path:
    """The `polygateway` operator binary (python/ci.sh builds it; PGW_TEST_CLI overrides)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path(__file__).parents[2] / "target"))
    path = Path(os.environ.get("PGW_TEST_CLI", target / "debug" / "polygateway"))
    if not path.is_file():
        message = f"the Rust CLI {path} is not built (cargo build --features full --bin polygateway)"
        if CI:
            pytest.fail(message)
        pytest.skip(f"LOUD SKIP: {message}")
    return path


def rust_chat(env, prompt: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LLM", "PGW_", "REDIS"))}
    clean.update(env)
    return subprocess.run([str(rust_cli()), "chat", prompt], env=clean, capture_output=True,
                          text=True, timeout=60)


async def _python_chat(env, prompt, **kwargs):
    client = GatewayClient.from_settings(env)
    try:
        return await client.chat([{"role": "user", "content": prompt}], **kwargs)
    finally:
        await client.aclose()  # flushes the telemetry writer


def test_sqlite_rows_match_the_rust_runtime(mock, tmp_path):
    db = tmp_path / "telemetry.sqlite"
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="sqlite", PGW_TELEMETRY_SQLITE_PATH=str(db))
    prompt = "telemetry parity " + uuid.uuid4().hex
    reply = run(_python_chat(env, prompt))
    done = rust_chat(env, prompt)
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM llm_calls ORDER BY created_at, rowid")]
    assert len(rows) == 2
    python_row, rust_row = rows
    assert python_row["call_id"] == reply.call_id
    assert python_row["call_group_id"] == reply.call_group_id
    assert python_row["parent_call_id"] is None and reply.parent_call_id is None
    assert python_row["response"] == reply.content
    assert (python_row["prompt_tokens"], python_row["completion_tokens"]) == (
        reply.prompt_tokens, reply.completion_tokens)
    same = {k: v for k, v in python_row.items() if k not in PER_CALL}
    assert same == {k: v for k, v in rust_row.items() if k not in PER_CALL}
    # The table is exactly the DDL `telemetry_schema_sql` hands out.
    reference = sqlite3.connect(":memory:")
    reference.executescript(telemetry_schema_sql("sqlite"))
    columns = [r[1] for r in reference.execute("PRAGMA table_info(llm_calls)")]
    assert list(python_row) == columns


def test_sqlite_rows_carry_tenant_meta_and_session(mock, tmp_path):
    db = tmp_path / "telemetry.sqlite"
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="sqlite", PGW_TELEMETRY_SQLITE_PATH=str(db))
    reply = run(_python_chat(env, "attributed", session_id="job-7", tenant_id="acme-corp",
                             meta={"batch_id": "b-42", "stage": "extract", "n": 3}))
    row = sqlite3.connect(db).execute(
        "SELECT session_id, tenant_id, meta, call_id FROM llm_calls").fetchone()
    assert row[0] == "job-7" and row[1] == "acme-corp"
    assert json.loads(row[2]) == {"batch_id": "b-42", "stage": "extract", "n": 3}
    assert row[3] == reply.call_id


def _psql(dsn: str, sql: str) -> str:
    done = subprocess.run(["psql", dsn, "-At", "-F", "\t", "-c", sql], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_postgres_rows_match_the_rust_runtime(mock, pg_dsn):
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="postgres", PGW_TELEMETRY_PG_DSN=pg_dsn,
                  PGW_TELEMETRY_SCHEMA_MODE="auto")
    prompt = "pg parity " + uuid.uuid4().hex
    session = "py-" + uuid.uuid4().hex
    reply = run(_python_chat(env, prompt, session_id=session, tenant_id="acme",
                             meta={"stage": "pg"}))
    done = rust_chat(env, prompt)
    assert done.returncode == 0, done.stderr
    columns = _psql(pg_dsn, "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) "
                            "FROM information_schema.columns WHERE table_name = 'llm_calls' "
                            "AND table_schema = current_schema()").strip().split(",")
    compared = [c for c in columns if c not in PER_CALL | {"session_id", "tenant_id", "meta"}]
    select = ", ".join(f"coalesce({c}::text, '<null>')" for c in compared)
    rows = _psql(pg_dsn, f"SELECT call_id, session_id, tenant_id, meta::text, {select} FROM llm_calls "
                         f"WHERE response IS NOT NULL AND messages LIKE '%{prompt}%' "
                         "ORDER BY created_at").splitlines()
    assert len(rows) == 2, rows
    python_row, rust_row = (r.split("\t") for r in rows)
    assert python_row[:4] == [reply.call_id, session, "acme", '{"stage": "pg"}']
    assert python_row[4:] == rust_row[4:]
