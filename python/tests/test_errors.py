"""Each runtime error reaches Python as the original library's exception class, with its fields."""

from __future__ import annotations

import pickle

import pytest

import polygateway
from polygateway import (
    AllSourcesExhausted,
    CircuitOpenError,
    ConfigError,
    GatewayClient,
    GatewayClosedError,
    GatewayUnavailableError,
    GovernanceBackendError,
    PolyGatewayError,
    RequestRejectedError,
    ResultInvalidError,
    SourceNotConfiguredError,
)
from conftest import llm_env, run

HI = [{"role": "user", "content": "hi"}]


async def _chat(env, **kwargs):
    client = GatewayClient.from_settings(env)
    try:
        return await client.chat(HI, **kwargs)
    finally:
        await client.aclose()


def test_hierarchy_matches_the_original():
    for cls in (CircuitOpenError, AllSourcesExhausted, GovernanceBackendError):
        assert issubclass(cls, GatewayUnavailableError)
    for cls in (polygateway.TransientError, polygateway.SourceDeadError, RequestRejectedError,
                ResultInvalidError, GatewayUnavailableError, SourceNotConfiguredError):
        assert issubclass(cls, PolyGatewayError)
    assert not issubclass(SourceNotConfiguredError, GatewayUnavailableError)


def test_bad_request_is_rejected_with_the_upstream_body(mock):
    mock.set_behaviour("bad_request")
    with pytest.raises(RequestRejectedError) as info:
        run(_chat(llm_env(mock.base_url)))
    assert info.value.body_text  # the upstream's answer, folded
    assert mock.counts()["chat"] == 1  # not retried


def test_dead_key_is_unavailable_with_a_positive_retry_after(mock):
    mock.set_behaviour("unauthorized")
    with pytest.raises(GatewayUnavailableError) as info:
        run(_chat(llm_env(mock.base_url)))
    exc = info.value
    # The original's tutorial: a wrong key ends in AllSourcesExhausted, not a bare 401 — the 401
    # opened the only source's breaker and no source was left to switch to.
    assert type(exc) is AllSourcesExhausted
    assert (exc.scope, exc.reason) == ("LLM", "circuit_open")
    assert exc.retry_after_s > 0
    assert exc.per_source_reasons == {"openai_1": "source_dead"}
    assert "sk-test" not in str(exc)  # the key never appears


def test_server_errors_exhaust_the_budget(mock):
    mock.set_behaviour("server_error", status=503)
    with pytest.raises(AllSourcesExhausted) as info:
        run(_chat(llm_env(mock.base_url, LLM__RETRY__MAX_ATTEMPTS=2)))
    assert info.value.reason == "retry_exhausted"
    assert mock.counts()["chat"] == 2


def test_unrepairable_json_is_result_invalid(mock):
    mock.set_behaviour("healthy", content="no json here at all")
    with pytest.raises(ResultInvalidError) as info:
        run(_chat(llm_env(mock.base_url), structured="json"))
    assert info.value.raw_text == "no json here at all"
    assert info.value.repair_error


def test_bad_tenant_and_meta_are_value_errors_before_sending(mock):
    env = llm_env(mock.base_url)
    for kwargs in (
        {"tenant_id": ""},
        {"tenant_id": " t1"},
        {"tenant_id": "x" * 129},
        {"meta": {"Bad-Key": 1}},
        {"meta": {"pg_reserved": 1}},
        {"meta": {f"k{i}": i for i in range(17)}},
        {"meta": {"v": "x" * 257}},
        {"meta": {"v": float("nan")}},
        {"meta": {"v": [1, 2]}},
    ):
        with pytest.raises(ValueError):
            run(_chat(env, **kwargs))
    assert mock.counts()["chat"] == 0
    ok = run(_chat(env, tenant_id="acme", meta={"batch_id": "b-1", "n": 2, "f": 0.5, "ok": True}))
    assert ok.content


def test_assembly_defects(mock):
    with pytest.raises(SourceNotConfiguredError):
        GatewayClient.from_settings(llm_env(mock.base_url), scope="JUDGE")
    env = llm_env(mock.base_url)
    del env["LLM__OPENAI__1__MODEL"]
    with pytest.raises(ConfigError) as info:
        GatewayClient.from_settings(env)
    assert "MODEL" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_unreachable_governance_backend_fails_each_call_closed(mock):
    env = llm_env(mock.base_url, PGW_LIMITER_BACKEND="redis", PGW_BREAKER_BACKEND="redis",
                  REDIS_URL="redis://127.0.0.1:1")
    # Redis down is an outage (the original's `except GatewayUnavailableError` catches it), not a
    # configuration mistake: as in the original, the client is built and each call fails closed
    # (test_last_differences.py starts the server later and sees the same client serve).
    async def scenario():
        client = GatewayClient.from_settings(env)
        errors = []
        try:
            for _ in range(2):
                with pytest.raises(GovernanceBackendError) as info:
                    await client.chat(HI)
                errors.append(info.value)
        finally:
            await client.aclose()
        return errors

    for exc in run(scenario()):
        assert not isinstance(exc, ValueError)
        assert (exc.reason, exc.retry_after_s) == ("governance_backend_down", 5.0)
        assert "redis" in str(exc) and "not connected" in str(exc)
    assert mock.counts()["chat"] == 0


def test_malformed_redis_url_stays_a_config_error(mock):
    env = llm_env(mock.base_url, PGW_LIMITER_BACKEND="redis", PGW_BREAKER_BACKEND="redis",
                  REDIS_URL="redis://:hunter2@127.0.0.1:notaport")
    with pytest.raises(ConfigError) as info:
        GatewayClient.from_settings(env)
    assert "REDIS_URL" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_a_call_refused_at_the_gate_is_circuit_open(mock):
    mock.set_behaviour("unauthorized")

    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        try:
            with pytest.raises(AllSourcesExhausted):
                await client.chat(HI)
            with pytest.raises(CircuitOpenError) as info:
                await client.chat(HI)
            return info.value
        finally:
            await client.aclose()

    exc = run(scenario())
    assert exc.reason == "circuit_open" and exc.retry_after_s > 0
    assert mock.counts()["chat"] == 1  # the second call sent nothing


@pytest.mark.parametrize(
    "native_name, cls",
    [
        ("CircuitOpenError", CircuitOpenError),
        ("AllSourcesExhausted", AllSourcesExhausted),
        ("GovernanceBackendError", GovernanceBackendError),
        ("RequestRejectedError", RequestRejectedError),
        ("ResultInvalidError", ResultInvalidError),
        ("SourceNotConfiguredError", SourceNotConfiguredError),
        ("ConfigError", ConfigError),
        ("GatewayClosedError", GatewayClosedError),
        ("StreamInterruptedError", polygateway.StreamInterruptedError),
        ("ValueError", ValueError),
        ("SomethingNew", PolyGatewayError),
    ],
)
def test_every_runtime_class_name_maps_to_its_exception(native_name, cls):
    from polygateway.exceptions import _from_native

    exc = _from_native(native_name, "message", {})
    assert type(exc) is cls
    assert str(exc) == "message"


def test_closed_client_raises(mock):
    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        await client.aclose()
        await client.chat(HI)

    with pytest.raises(GatewayClosedError):
        run(scenario())


def test_errors_pickle_with_their_fields(mock):
    mock.set_behaviour("unauthorized")
    with pytest.raises(GatewayUnavailableError) as info:
        run(_chat(llm_env(mock.base_url)))
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is type(info.value)
    assert (copy.scope, copy.reason, copy.retry_after_s, copy.per_source_reasons) == (
        info.value.scope, info.value.reason, info.value.retry_after_s,
        info.value.per_source_reasons,
    )
    assert str(copy) == str(info.value)
