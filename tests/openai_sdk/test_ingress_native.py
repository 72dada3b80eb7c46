"""The unchanged `anthropic` SDK (Messages) and `openai` SDK (Responses) through `polygateway
serve` onto an Anthropic-dialect source (scope `CLAUDE`, the testkit's Anthropic mock, which
speaks the published API; started by run.sh). test_ingress.py runs the same ingresses onto the
OpenAI-compatible source.

- Messages is the source's own dialect: the request passes through as written (but `model`),
  so the SDK's final message through the gateway — created, or accumulated from the stream by
  the SDK's own `get_final_message()` — equals the one it builds talking to the same mock
  directly, thinking signatures and tool calls included (ids and model names apart: the
  gateway names the message, the mock counts its tool calls).
- Responses is translated: the same text, tool calls, stop and usage as the direct call.
"""

import json
import os

import anthropic
import openai

BASE = os.environ["PGW_BASE_URL"]
KEY = os.environ["PGW_KEY"]
ANTHROPIC_URL = os.environ["PGW_ANTHROPIC_URL"].removesuffix("/v1")
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HELLO = [{"role": "user", "content": "hello"}]
THINKING = {"type": "enabled", "budget_tokens": 1024}


def gateway():
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=30)


def upstream():
    return anthropic.Anthropic(base_url=ANTHROPIC_URL, api_key="sk-ant-mock", max_retries=0,
                               timeout=30)


def oai():
    return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=30)


def comparable(message):
    """A message's dump without what names it: its id, its model, its tool calls' ids."""
    d = message.model_dump()
    d.pop("id")
    d.pop("model")
    for block in d["content"]:
        if block["type"] == "tool_use":
            block.pop("id")
    return d


def both(**kwargs):
    """The same request through the gateway (scope CLAUDE) and straight to the mock."""
    through = gateway().messages.create(model="CLAUDE", **kwargs)
    direct = upstream().messages.create(model="claude-mock", **kwargs)
    return through, direct


def both_streamed(**kwargs):
    finals = []
    for client, model in ((gateway(), "CLAUDE"), (upstream(), "claude-mock")):
        with client.messages.stream(model=model, **kwargs) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        finals.append((text, final))
    return finals


def test_messages_create_equals_the_direct_message():
    through, direct = both(max_tokens=64, system="be brief", messages=HELLO)
    assert through.model == "CLAUDE" and direct.model == "claude-mock"
    assert comparable(through) == comparable(direct)
    assert through.content[0].text == "Hello from Claude"


def test_messages_stream_final_message_equals_the_direct_one():
    (text, final), (direct_text, direct_final) = both_streamed(max_tokens=64, messages=HELLO)
    assert text == direct_text == "Hello from Claude"
    assert comparable(final) == comparable(direct_final)


def test_messages_tool_round_trip_equals_the_direct_one():
    ask = [{"role": "user", "content": "weather in Paris?"}]
    through, direct = both(max_tokens=64, messages=ask, tools=[WEATHER])
    assert through.stop_reason == "tool_use"
    assert comparable(through) == comparable(direct)
    use = next(b for b in through.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "weather in Paris?"})
    follow = ask + [
        {"role": "assistant", "content": [b.model_dump() for b in through.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "21C and sunny"}]},
    ]
    (text, final), (direct_text, direct_final) = both_streamed(
        max_tokens=64, tools=[WEATHER], messages=follow)
    assert text == direct_text
    assert comparable(final) == comparable(direct_final)
    assert final.content[-1].text == "tool said: 21C and sunny" == text


def test_messages_thinking_round_trip_keeps_the_signature():
    ask = [{"role": "user", "content": "weather in Paris?"}]
    with gateway().messages.stream(model="CLAUDE", max_tokens=2048, thinking=THINKING,
                                   tools=[WEATHER], messages=ask) as s:
        first = s.get_final_message()
    with upstream().messages.stream(model="claude-mock", max_tokens=2048, thinking=THINKING,
                                    tools=[WEATHER], messages=ask) as s:
        direct = s.get_final_message()
    assert comparable(first) == comparable(direct)
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    assert first.content[0].signature  # signed by the mock, which checks it when it comes back
    use = first.content[1]
    # The turn sent back as the SDK gave it: the mock refuses a changed signature.
    second = gateway().messages.create(model="CLAUDE", max_tokens=2048, thinking=THINKING,
                                       tools=[WEATHER], messages=ask + [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
    ])
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "thinking"
    assert second.content[-1].text == "tool said: sunny"


def test_count_tokens_on_an_anthropic_source():
    n = gateway().messages.count_tokens(model="CLAUDE", messages=HELLO)
    assert n.input_tokens == 2  # the gateway's estimate: five characters at four per token


def direct_message(**kwargs):
    return upstream().messages.create(model="claude-mock", max_tokens=4096, **kwargs)


def test_responses_create_on_an_anthropic_source():
    r = oai().responses.create(model="CLAUDE", input="hello", instructions="be brief")
    d = direct_message(system=[{"type": "text", "text": "be brief"}], messages=HELLO)
    assert r.status == "completed"
    assert r.output_text == d.content[0].text == "Hello from Claude"
    assert r.usage.input_tokens == d.usage.input_tokens
    assert r.usage.output_tokens == d.usage.output_tokens


def test_responses_stream_on_an_anthropic_source():
    with oai().responses.stream(model="CLAUDE", input="hello") as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    d = direct_message(messages=HELLO)
    assert text == final.output_text == d.content[0].text
    assert final.usage.input_tokens == d.usage.input_tokens
    assert final.usage.output_tokens == d.usage.output_tokens


def test_responses_function_round_trip_on_an_anthropic_source():
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"]}
    r = oai().responses.create(model="CLAUDE", input="weather in Paris?", tools=[tool])
    d = direct_message(messages=[{"role": "user", "content": "weather in Paris?"}],
                       tools=[{"name": "get_weather", "input_schema": WEATHER["input_schema"]}])
    calls = [i for i in r.output if i.type == "function_call"]
    uses = [b for b in d.content if b.type == "tool_use"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(u.name, u.input) for u in uses]
    assert r.usage.output_tokens == d.usage.output_tokens
    r2 = oai().responses.create(model="CLAUDE", tools=[tool], input=[
        {"role": "user", "content": "weather in Paris?"},
        calls[0].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "21C and sunny"},
    ])
    assert r2.output_text == "tool said: 21C and sunny"


def test_responses_json_schema_on_an_anthropic_source():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}},
              "required": ["answer"], "additionalProperties": False}
    # On Anthropic a schema is a forced tool; the mock fills a string property with the prompt.
    r = oai().responses.create(model="CLAUDE", input="answer in JSON", text={"format": {
        "type": "json_schema", "name": "answer", "schema": schema, "strict": True}})
    assert r.status == "completed"
    assert json.loads(r.output_text) == {"answer": "answer in JSON"}
