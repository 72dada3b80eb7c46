"""Shared fixtures: mock upstreams, configuration over them, and the real services.

Redis and PostgreSQL are the real servers on loopback. Under ``CI=true`` an unreachable one is a
failure; on a developer machine its tests are skipped with a loud reason.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict

import pytest

from polygateway.testing import MockOcr, MockUpstream, mock_env

CI = os.environ.get("CI") == "true"
REDIS_URL = os.environ.get("PGW_TEST_REDIS_URL", "redis://127.0.0.1:6379")
PG_DSN = os.environ.get("PGW_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def run(coro):
    """Run one coroutine on a fresh event loop (no pytest plugin needed)."""
    return asyncio.run(coro)


def require_service(name: str, host: str, port: int) -> None:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        message = f"{name} on {host}:{port} is not reachable ({exc})"
        if CI:
            pytest.fail(f"{message}; CI=true requires it")
        print(f"\n!!! SKIPPING: {message} !!!", file=sys.stderr)
        pytest.skip(f"LOUD SKIP: {message}")


@pytest.fixture
def redis_url() -> str:
    require_service("Redis", "127.0.0.1", 6379)
    return REDIS_URL


@pytest.fixture
def pg_dsn() -> str:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    return PG_DSN


@pytest.fixture
def mock() -> MockUpstream:
    return MockUpstream()


@pytest.fixture
def ocr_mock() -> MockOcr:
    return MockOcr()


@pytest.fixture
def unique_scope() -> str:
    """A scope name no other test (or earlier run) used: Redis state is keyed by scope."""
    return "PY" + uuid.uuid4().hex[:10].upper()


def llm_env(base_url: str, **extra) -> Dict[str, str]:
    return mock_env("LLM", base_url, **extra)


def run_script(code: str, *, cwd: Path = None, env: Dict[str, str] = None, timeout: float = 60):
    """Run ``code`` in a fresh interpreter of this virtual environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LLM", "EMBED", "OCR", "PGW_"))}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=base, capture_output=True, text=True,
        timeout=timeout,
    )
