"""``structured=``: a pydantic model class (schema sent, answer validated, errors fed back on a
re-ask) or ``"json"`` (repair only)."""

from __future__ import annotations

import json
from typing import List, Optional

import pytest
from pydantic import BaseModel

from polygateway import GatewayClient, ResultInvalidError
from conftest import llm_env, run

ASK = [{"role": "user", "content": "Largest city of Norway, as JSON"}]


class City(BaseModel):
    name: str
    population: int
    districts: Optional[List[str]] = None


async def _chat(env, **kwargs):
    client = GatewayClient.from_settings(env)
    try:
        return await client.chat(ASK, **kwargs)
    finally:
        await client.aclose()


def test_pydantic_model_reasks_with_the_validation_errors(mock):
    mock.set_behaviour("scripted_content", contents=[
        "Sure! {'name': 'Oslo', 'population': 'many'}",  # repairable, but fails validation
        '{"name": "Oslo", "population": 709000}',
    ])
    reply = run(_chat(llm_env(mock.base_url), structured=City))
    assert isinstance(reply.structured_data, City)
    assert reply.structured_data == City(name="Oslo", population=709000)
    assert reply.asks == 2
    # The schema went to the model (strict json_schema for an `openai` source) and the re-ask
    # carried pydantic's error for the bad field.
    counts = mock.counts()
    assert counts["chat"] == 2


def test_schema_and_feedback_reach_the_upstream(mock):
    mock.set_behaviour("scripted_content", contents=[
        '{"name": "Oslo"}',
        '{"name": "Oslo", "population": 709000}',
    ])
    from polygateway.structured import schema_call

    call = schema_call(City)
    assert json.loads(call.schema_json)["title"] == "City"
    assert call.validate('{"name": "Oslo"}') == ["population: Field required"]
    assert call.validate('{"name": "Oslo", "population": 1}') is None
    reply = run(_chat(llm_env(mock.base_url), structured=City))
    assert reply.structured_data.population == 709000
    first, reask = mock.request_bodies()
    # An `openai` source gets strict json_schema on every ask, the first included.
    for body in (first, reask):
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["name"] == "City"
        assert body["response_format"]["json_schema"]["schema"]["additionalProperties"] is False
    # The re-ask: the question, the bad answer, and a correction naming pydantic's error.
    assert [m["role"] for m in reask["messages"]] == ["user", "assistant", "user"]
    assert "population: Field required" in reask["messages"][2]["content"]


def test_pydantic_model_gives_up_as_result_invalid(mock):
    mock.set_behaviour("healthy", content='{"name": "Oslo"}')
    with pytest.raises(ResultInvalidError) as info:
        run(_chat(llm_env(mock.base_url, PGW_STRUCTURED_MAX_RETRIES=1), structured=City))
    assert info.value.validation_errors == ["population: Field required"]
    assert info.value.raw_text == '{"name": "Oslo"}'
    assert mock.counts()["chat"] == 2  # the first ask and one re-ask


def test_json_mode_repairs(mock):
    mock.set_behaviour("healthy", content="```json\n{'ok': True, 'n': 3,}\n```")
    reply = run(_chat(llm_env(mock.base_url), structured="json"))
    assert reply.structured_data == {"ok": True, "n": 3}


def test_anything_else_is_refused(mock):
    with pytest.raises(ValueError):
        run(_chat(llm_env(mock.base_url), structured=dict))
    assert mock.counts()["chat"] == 0


def test_structured_answers_are_cached_and_revalidated(mock):
    env = llm_env(mock.base_url, PGW_CACHE_BACKEND="memory", PGW_CACHE_NAMESPACE="py",
                  PGW_CACHE_TTL_S="60")
    mock.set_behaviour("healthy", content='{"name": "Oslo", "population": 709000}')

    async def twice():
        client = GatewayClient.from_settings(env)
        first = await client.chat(ASK, structured=City)
        second = await client.chat(ASK, structured=City)
        await client.aclose()
        return first, second

    first, second = run(twice())
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert second.structured_data == first.structured_data
    assert mock.counts()["chat"] == 1
