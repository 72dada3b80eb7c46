"""Native Anthropic sources with real clients (issue #45).

1. The official `anthropic` SDK straight against the testkit's Anthropic mock: the mock's
   messages, event streams (through the SDK's own stream accumulator), tool use and thinking
   with signatures are what the SDK reads — the proof that the mock the Rust tests run against
   speaks the published API, not our translation of it.
2. The unchanged OpenAI SDK through `polygateway serve` onto that Anthropic source (scope
   `CLAUDE`): text, a streamed answer, and a tool loop, translated both ways.
"""

import json
import os

import anthropic
import openai

ANTHROPIC_URL = os.environ["PGW_ANTHROPIC_URL"].removesuffix("/v1")
ANTHROPIC_KEY = "sk-ant-mock"
BASE = os.environ["PGW_BASE_URL"] + "/v1"
KEY = os.environ["PGW_KEY"]
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def claude():
    return anthropic.Anthropic(base_url=ANTHROPIC_URL, api_key=ANTHROPIC_KEY, max_retries=0)


def test_the_mock_answers_what_the_anthropic_sdk_reads():
    m = claude().messages.create(
        model="claude-mock", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
    )
    assert m.type == "message" and m.role == "assistant"
    assert m.content[0].type == "text" and m.content[0].text == "Hello from Claude"
    assert m.stop_reason == "end_turn"
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0


def test_the_mocks_stream_is_what_the_sdks_accumulator_builds_on():
    with claude().messages.stream(
        model="claude-mock", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello from Claude"
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


def test_tool_use_with_thinking_round_trips_through_the_sdk():
    ask = [{"role": "user", "content": "Paris"}]
    kwargs = dict(
        model="claude-mock",
        max_tokens=4096,
        tools=[WEATHER],
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    with claude().messages.stream(messages=ask, **kwargs) as stream:
        first = stream.get_final_message()
    kinds = [b.type for b in first.content]
    assert kinds == ["thinking", "tool_use"], kinds
    assert first.content[0].signature, "the signature survived the accumulator"
    assert first.content[1].input == {"city": "Paris"}
    assert first.stop_reason == "tool_use"
    # The assistant turn goes back as the SDK built it; the mock checks the signature.
    turn = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "18 C"}]}
    second = claude().messages.create(messages=ask + [turn, result], **kwargs)
    assert second.content[-1].text == "tool said: 18 C"


def test_cache_usage_reaches_the_sdk():
    system = [{"type": "text", "text": "Rules. " * 300, "cache_control": {"type": "ephemeral"}}]
    first = claude().messages.create(
        model="claude-mock", max_tokens=64, system=system,
        messages=[{"role": "user", "content": "one"}])
    second = claude().messages.create(
        model="claude-mock", max_tokens=64, system=system,
        messages=[{"role": "user", "content": "two"}])
    assert first.usage.cache_creation_input_tokens > 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


def gateway():
    return openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=30)


def test_the_openai_sdk_through_serve_onto_an_anthropic_source():
    r = gateway().chat.completions.create(
        model="CLAUDE", messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Hi"}])
    assert r.choices[0].message.content == "Hello from Claude"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    chunks = list(gateway().chat.completions.create(
        model="CLAUDE", messages=[{"role": "user", "content": "Hi"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from Claude"


def test_an_openai_tool_loop_runs_on_an_anthropic_source():
    tool = {"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"]}}
    ask = [{"role": "user", "content": "Paris"}]
    first = gateway().chat.completions.create(model="CLAUDE", messages=ask, tools=[tool])
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    history = ask + [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "18 C"}]
    second = gateway().chat.completions.create(model="CLAUDE", messages=history, tools=[tool])
    assert second.choices[0].message.content == "tool said: 18 C"
