"""The unchanged `anthropic` SDK (Messages) and `openai` SDK (Responses) against
`polygateway serve` (started by run.sh over the OpenAI-compatible mock upstream): each answer
through the gateway carries the same text, tool calls, stop reason and usage as the same
conversation sent straight to the upstream with the OpenAI chat SDK (the translated case)."""

import json
import os
import urllib.request

import anthropic
import openai

BASE = os.environ["PGW_BASE_URL"]
KEY = os.environ["PGW_KEY"]
UPSTREAM = os.environ["PGW_UPSTREAM_URL"]
MOCK_CONTENT = "Hello from the mock upstream."
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def claude():
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=30)


def oai():
    return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=30)


def direct(**kwargs):
    """The same conversation straight to the upstream, with the OpenAI chat SDK."""
    c = openai.OpenAI(base_url=UPSTREAM, api_key="sk-mock-upstream", max_retries=0, timeout=30)
    return c.chat.completions.create(model="mock-model", **kwargs)


def received():
    url = UPSTREAM.removesuffix("/v1") + "/mock/last_request"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


HELLO = [{"role": "user", "content": "hello"}]


def test_messages_create():
    m = claude().messages.create(model="LLM", max_tokens=64, messages=HELLO)
    d = direct(messages=HELLO, max_tokens=64)
    assert m.type == "message" and m.role == "assistant"
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == d.choices[0].message.content == MOCK_CONTENT
    assert m.stop_reason == "end_turn"
    assert m.usage.input_tokens == d.usage.prompt_tokens
    assert m.usage.output_tokens == d.usage.completion_tokens


def test_messages_stream_final_message():
    with claude().messages.stream(model="LLM", max_tokens=64, messages=HELLO) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == MOCK_CONTENT
    assert final.content[0].text == MOCK_CONTENT
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == direct(messages=HELLO).usage.completion_tokens


def test_messages_tool_round_trip():
    ask = [{"role": "user", "content": "weather in Paris?"}]
    m = claude().messages.create(model="LLM", max_tokens=64, messages=ask, tools=[WEATHER])
    assert received()["tools"][0]["function"]["name"] == "get_weather"
    d = direct(messages=ask, tools=[{"type": "function", "function": {
        "name": WEATHER["name"], "description": WEATHER["description"],
        "parameters": WEATHER["input_schema"]}}])
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [
        (t.function.name, json.loads(t.function.arguments)) for t in d.choices[0].message.tool_calls
    ]
    with claude().messages.stream(model="LLM", max_tokens=64, tools=[WEATHER], messages=ask + [
        {"role": "assistant", "content": [u.model_dump() for u in uses]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": uses[0].id, "content": "21C and sunny"}]},
    ]) as s:
        final = s.get_final_message()
    assert final.content[0].text == "tool said: 21C and sunny"
    sent = received()
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": uses[0].id, "content": "21C and sunny"}


def test_messages_thinking_round_trip():
    """A signed thinking block the client sends back is its assistant turn's thinking; an
    OpenAI-compatible source has no place for it, so it is left out while the turn's tool call
    and the result go on (the Anthropic-source run is test_ingress_native.py)."""
    ask = [{"role": "user", "content": "weather in Paris?"}]
    m = claude().messages.create(model="LLM", max_tokens=64, messages=ask, tools=[WEATHER])
    uses = [b for b in m.content if b.type == "tool_use"]
    thought = {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"}
    with claude().messages.stream(model="LLM", max_tokens=64, tools=[WEATHER], messages=ask + [
        {"role": "assistant", "content": [thought] + [u.model_dump() for u in uses]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]},
    ]) as s:
        final = s.get_final_message()
    assert final.content[-1].text == "tool said: sunny"
    assert final.stop_reason == "end_turn"
    turn = received()["messages"][1]
    assert turn["role"] == "assistant" and "thinking_blocks" not in turn
    assert [c["id"] for c in turn["tool_calls"]] == [uses[0].id]


def test_count_tokens():
    n = claude().messages.count_tokens(model="LLM", messages=HELLO)
    assert n.input_tokens == 2  # "hello": five characters at four per token


def test_messages_errors_are_anthropic_exceptions():
    bad = anthropic.Anthropic(base_url=BASE, api_key="pgw-nope", max_retries=0)
    try:
        bad.messages.create(model="LLM", max_tokens=8, messages=HELLO)
        raise AssertionError("an unknown key was accepted")
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401
    try:
        claude().messages.create(model="nope", max_tokens=8, messages=HELLO)
        raise AssertionError("an unknown model was accepted")
    except anthropic.NotFoundError as e:
        assert e.status_code == 404


def test_responses_create():
    r = oai().responses.create(model="LLM", input="hello", instructions="be brief")
    d = direct(messages=[{"role": "developer", "content": "be brief"}] + HELLO)
    assert r.status == "completed"
    assert r.output_text == d.choices[0].message.content
    assert r.usage.input_tokens == d.usage.prompt_tokens
    assert r.usage.output_tokens == d.usage.completion_tokens


def test_responses_stream():
    with oai().responses.stream(model="LLM", input="hello") as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert text == MOCK_CONTENT == final.output_text
    assert final.usage.output_tokens > 0


def test_responses_function_round_trip():
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"]}
    r = oai().responses.create(model="LLM", input="weather in Paris?", tools=[tool])
    calls = [i for i in r.output if i.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == {"query": "weather in Paris?"}
    r2 = oai().responses.create(model="LLM", tools=[tool], input=[
        {"role": "user", "content": "weather in Paris?"},
        calls[0].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "21C and sunny"},
    ])
    assert r2.output_text == "tool said: 21C and sunny"


def test_responses_json_schema():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}},
              "required": ["answer"], "additionalProperties": False}
    # The mock echoes a tool's output ("tool said: …"): the ladder extracts the JSON from it.
    r = oai().responses.create(model="LLM", text={"format": {
        "type": "json_schema", "name": "answer", "schema": schema, "strict": True}}, input=[
        {"role": "user", "content": "answer in JSON"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": '{"answer": "yes"}'},
    ])
    assert r.status == "completed"
    assert json.loads(r.output_text) == {"answer": "yes"}


def test_previous_response_id_is_refused_naming_the_alternative():
    try:
        oai().responses.create(model="LLM", input="more", previous_response_id="resp_x")
        raise AssertionError("previous_response_id was accepted")
    except openai.BadRequestError as e:
        assert "whole conversation" in str(e)
