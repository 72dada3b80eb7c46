"""The original library's semantics where its documents are explicit: required keys refused at
assembly, no streaming watchdog unless its keys are set, telemetry that says at once when it
cannot write (and creates its directory), the original's ``error`` prefixes and
``parent_call_id``."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from polygateway import AllSourcesExhausted, ConfigError, GatewayClient
from conftest import llm_env, run

HI = [{"role": "user", "content": "hi"}]


async def _chat(env, **kwargs):
    client = GatewayClient.from_settings(env)
    try:
        return await client.chat(HI, **kwargs)
    finally:
        await client.aclose()


@pytest.mark.parametrize("key", ["PGW_CACHE_BACKEND", "PGW_TELEMETRY_BACKEND",
                                 "LLM__OPENAI__1__API_KEY", "LLM__OPENAI__1__TIMEOUT_S"])
def test_keys_the_original_requires_are_refused_naming_what_to_add(mock, key):
    env = llm_env(mock.base_url)
    del env[key]
    with pytest.raises(ConfigError) as info:
        GatewayClient.from_settings(env)
    assert f"missing required key {key}: add it" in str(info.value)


def test_llm_timeout_stands_in_for_every_source_timeout(mock):
    env = llm_env(mock.base_url, LLM_TIMEOUT="30")
    del env["LLM__OPENAI__1__TIMEOUT_S"]
    assert run(_chat(env)).content


def test_tpm_without_est_tokens_derives_the_reservation_as_the_original_1_3_does(mock):
    # The original's architecture (est_tokens optional since 2026-07-30; max(1, tpm // 60)).
    assert run(_chat(llm_env(mock.base_url, LLM__OPENAI__1__TPM="6000"))).content


def test_no_watchdog_unless_its_keys_are_set(mock):
    mock.set_behaviour("healthy", ttft_ms=2500)
    env = llm_env(mock.base_url, LLM__OPENAI__1__TIMEOUT_S="4", LLM__RETRY__MAX_ATTEMPTS="1")
    # A model that needs 2.5 s to its first token works under a 4 s total limit, streamed.
    assert run(_chat(env, stream=True)).content
    # A stall window shorter than a TTFT nobody set is fine.
    assert run(_chat(llm_env(mock.base_url, LLM__BACKPRESSURE__STALL_WINDOW_S="5"))).content


def test_the_watchdog_keys_turn_it_on_and_come_in_pairs(mock):
    mock.set_behaviour("healthy", ttft_ms=1500)
    env = llm_env(mock.base_url, LLM__RETRY__MAX_ATTEMPTS="1", LLM_TTFT_TIMEOUT="1",
                  LLM_INTER_TOKEN_TIMEOUT="0.5")
    with pytest.raises(AllSourcesExhausted) as info:
        run(_chat(env, stream=True))
    assert "ttft" in str(info.value)
    with pytest.raises(ConfigError, match="INTER_TOKEN_TIMEOUT_S: add it"):
        GatewayClient.from_settings(llm_env(mock.base_url, LLM__OPENAI__1__TTFT_TIMEOUT_S="1"))


def test_missing_telemetry_directory_is_created(mock, tmp_path):
    db = tmp_path / "logs" / "telemetry.db"  # the tutorial's relative path, under tmp
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="sqlite", PGW_TELEMETRY_SQLITE_PATH=str(db))
    reply = run(_chat(env))
    rows = sqlite3.connect(db).execute("SELECT call_id FROM llm_calls").fetchall()
    assert rows == [(reply.call_id,)]


def test_telemetry_that_cannot_write_says_so_at_once(mock, tmp_path, caplog):
    # The path is a directory: SQLite cannot open it as a database.
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="sqlite",
                  PGW_TELEMETRY_SQLITE_PATH=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="polygateway"):
        client = GatewayClient.from_settings(env)
        warned = [r for r in caplog.records if r.name == "polygateway"]
    try:
        assert any("telemetry degraded" in r.getMessage() and str(tmp_path) in r.getMessage()
                   and r.levelno == logging.WARNING for r in warned), warned
        status = client.telemetry_status
        assert status.degraded and str(tmp_path) in status.reason
    finally:
        run(client.aclose())


def _rows(db):
    conn = sqlite3.connect(db)
    return conn.execute(
        "SELECT source_name, error, parent_call_id, call_group_id FROM llm_calls "
        "ORDER BY created_at, rowid").fetchall()


def test_error_column_uses_the_originals_class_names(mock, tmp_path):
    db = tmp_path / "t.db"
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="sqlite",
                  PGW_TELEMETRY_SQLITE_PATH=str(db), LLM__RETRY__MAX_ATTEMPTS="2",
                  LLM__RETRY__BACKOFF_BASE_S="0.01", LLM__RETRY__BACKOFF_MAX_S="0.01")
    mock.set_behaviour("server_error", status=503)
    with pytest.raises(AllSourcesExhausted):
        run(_chat(env))
    mock.set_behaviour("unauthorized")
    with pytest.raises(AllSourcesExhausted):
        run(_chat(env))
    errors = [e.split(": ")[0] for _, e, _, _ in _rows(db)]
    # One row per attempt (and per terminal refusal), prefixed with the original's class name.
    assert errors.count("TransientError") == 2 and errors.count("SourceDeadError") == 1, errors
    originals = {"TransientError", "SourceDeadError", "AllSourcesExhausted", "CircuitOpenError"}
    assert set(errors) <= originals, errors


def test_parent_call_id_is_the_callers_chain_link(mock, tmp_path):
    db = tmp_path / "t.db"
    env = llm_env(mock.base_url, PGW_TELEMETRY_BACKEND="sqlite",
                  PGW_TELEMETRY_SQLITE_PATH=str(db))
    first = run(_chat(env))
    second = run(_chat(env, parent_call_id=first.call_id))
    assert first.parent_call_id is None and second.parent_call_id == first.call_id
    rows = _rows(db)
    assert [r[2] for r in rows] == [None, first.call_id]  # the original: else empty
    assert [r[3] for r in rows] == [first.call_group_id, second.call_group_id]
    assert first.call_group_id != second.call_group_id
