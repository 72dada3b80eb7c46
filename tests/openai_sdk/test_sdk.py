"""The unchanged OpenAI Python SDK against `polygateway serve` (started by run.sh over the mock
upstreams): chat, streaming, tool calls, logprobs, n choices, finish reasons, every role,
embeddings, models, errors and virtual keys. Protocol checks look at both ends: what the mock
upstream received (`GET /mock/last_request`) and what the SDK returned, compared with what the
same SDK returns straight from the upstream."""

import json
import os
import urllib.request

import openai
import pytest

BASE = os.environ["PGW_BASE_URL"] + "/v1"
KEY = os.environ["PGW_KEY"]
MOCK_CONTENT = "Hello from the mock upstream."


UPSTREAM = os.environ["PGW_UPSTREAM_URL"]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLOCK = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}


def client(key=KEY):
    # No SDK retries: every error must be the server's first answer.
    return openai.OpenAI(base_url=BASE, api_key=key, max_retries=0, timeout=30)


def upstream():
    """The same SDK straight against the mock upstream."""
    return openai.OpenAI(base_url=UPSTREAM, api_key="sk-mock-upstream", max_retries=0, timeout=30)


def received():
    """The body of the last request the mock upstream received."""
    url = UPSTREAM.removesuffix("/v1") + "/mock/last_request"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def accumulated(c, **kwargs):
    """The SDK's own stream accumulator: the final completion of a streamed request."""
    streams = getattr(c.chat.completions, "stream", None) or c.beta.chat.completions.stream
    with streams(**kwargs) as s:
        for _ in s:
            pass
        # The accumulator's snapshot (`get_final_completion` also parses, and refuses `length`).
        return s.current_completion_snapshot


def message_of(choice):
    """What a choice says, without ids that differ per request."""
    m = choice.message
    calls = [(t.type, t.function.name, t.function.arguments) for t in m.tool_calls or []]
    return (m.role, m.content, m.refusal, calls, choice.finish_reason)


def both(**kwargs):
    """The answer through the gateway and straight from the upstream, for `model`-less kwargs."""
    via = client().chat.completions.create(model="LLM", **kwargs)
    sent = received()
    direct = upstream().chat.completions.create(model="mock-model", **kwargs)
    return via, direct, sent


def test_chat():
    r = client().chat.completions.create(
        model="LLM",
        messages=[{"role": "user", "content": "hello"}],
        temperature=0.2,
    )
    assert r.choices[0].message.content == MOCK_CONTENT
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_through_an_alias():
    r = client().chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert r.choices[0].message.content == MOCK_CONTENT
    assert r.model == "gpt-4o-mini"


def test_streaming_with_usage():
    stream = client().chat.completions.create(
        model="LLM",
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == MOCK_CONTENT
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_embeddings():
    r = client().embeddings.create(model="EMBED", input=["alpha", "beta"])
    assert [d.index for d in r.data] == [0, 1]
    assert all(len(d.embedding) == 8 for d in r.data)
    assert r.data[0].embedding != r.data[1].embedding
    floats = client().embeddings.create(
        model="text-embedding-3-small", input="alpha", encoding_format="float"
    )
    assert floats.data[0].embedding == pytest.approx(r.data[0].embedding)


def test_models():
    ids = {m.id for m in client().models.list()}
    assert {"LLM", "EMBED", "gpt-4o-mini", "text-embedding-3-small"} <= ids


def test_an_unknown_key_is_401():
    with pytest.raises(openai.AuthenticationError) as e:
        client("pgw-not-a-key").chat.completions.create(
            model="LLM", messages=[{"role": "user", "content": "x"}]
        )
    assert e.value.code == "invalid_api_key"


def test_a_forbidden_scope_is_403():
    with pytest.raises(openai.PermissionDeniedError):
        client(os.environ["PGW_LLM_ONLY_KEY"]).embeddings.create(model="EMBED", input="x")


def test_an_unknown_model_is_404():
    with pytest.raises(openai.NotFoundError):
        client().chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "x"}]
        )


def test_a_bad_request_is_400():
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(
            model="LLM",
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "yaml"},
        )
    assert e.value.param == "response_format"


def test_tool_calls_not_streamed():
    messages = [{"role": "user", "content": "weather in Paris?"}]
    via, direct, sent = both(messages=messages, tools=[WEATHER, CLOCK], tool_choice="auto")
    assert sent["tools"] == [WEATHER, CLOCK] and sent["tool_choice"] == "auto"
    choice = via.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    names = [t.function.name for t in choice.message.tool_calls]
    assert names == ["get_weather", "get_time"]
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {
        "query": "weather in Paris?"
    }
    assert message_of(choice) == message_of(direct.choices[0])
    assert [t.id for t in choice.message.tool_calls] == [t.id for t in direct.choices[0].message.tool_calls]


def test_tool_calls_streamed_accumulate_to_the_same_message():
    kwargs = dict(
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER],
        parallel_tool_calls=False,
    )
    via = accumulated(client(), model="LLM", **kwargs)
    sent = received()
    direct = accumulated(upstream(), model="mock-model", **kwargs)
    assert sent["stream"] is True and sent["parallel_tool_calls"] is False
    assert via.choices[0].finish_reason == "tool_calls"
    assert len(via.choices[0].message.tool_calls) == 1
    assert message_of(via.choices[0]) == message_of(direct.choices[0])
    # The raw chunks carry the pieces in OpenAI's shape: id and name first, then arguments.
    chunks = list(
        client().chat.completions.create(model="LLM", stream=True, **kwargs)
    )
    pieces = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert pieces[0].id and pieces[0].function.name == "get_weather"
    assert len(pieces) >= 2 and all(p.index == 0 for p in pieces)


def test_a_multi_turn_tool_conversation():
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "21C and sunny"},
    ]
    for stream in (False, True):
        if stream:
            r = accumulated(client(), model="LLM", messages=messages, tools=[WEATHER])
        else:
            r = client().chat.completions.create(model="LLM", messages=messages, tools=[WEATHER])
        # The history reached the upstream exactly as written.
        assert received()["messages"] == messages
        assert r.choices[0].message.content == "tool said: 21C and sunny"
        assert r.choices[0].finish_reason == "stop"


def test_logprobs():
    via, direct, sent = both(
        messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2
    )
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2
    tokens = [t.token for t in via.choices[0].logprobs.content]
    assert "".join(tokens) == MOCK_CONTENT
    assert via.choices[0].logprobs == direct.choices[0].logprobs
    # Streamed logprobs come per delta; the accumulator joins them the same either way.
    kwargs = dict(messages=[{"role": "user", "content": "hi"}], logprobs=True)
    streamed = accumulated(client(), model="LLM", **kwargs)
    streamed_direct = accumulated(upstream(), model="mock-model", **kwargs)
    assert streamed.choices[0].logprobs == streamed_direct.choices[0].logprobs
    assert "".join(t.token for t in streamed.choices[0].logprobs.content) == MOCK_CONTENT


def test_n_choices():
    via, direct, sent = both(messages=[{"role": "user", "content": "hi"}], n=2)
    assert sent["n"] == 2
    assert [c.index for c in via.choices] == [0, 1]
    assert [message_of(c) for c in via.choices] == [message_of(c) for c in direct.choices]
    assert via.choices[1].message.content.startswith("[1] ")
    streamed = accumulated(client(), model="LLM", messages=[{"role": "user", "content": "hi"}], n=2)
    assert [message_of(c) for c in streamed.choices] == [message_of(c) for c in direct.choices]


def test_finish_reason_length():
    for stream in (False, True):
        kwargs = dict(messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        if stream:
            r = accumulated(client(), model="LLM", **kwargs)
        else:
            r = client().chat.completions.create(model="LLM", **kwargs)
        assert received()["max_tokens"] == 2
        assert r.choices[0].finish_reason == "length"
        assert r.choices[0].message.content and r.choices[0].message.content != MOCK_CONTENT


def test_developer_role_and_message_name():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "hi", "name": "alice"},
    ]
    via, direct, sent = both(messages=messages)
    assert sent["messages"] == messages
    assert message_of(via.choices[0]) == message_of(direct.choices[0])
    assert via.choices[0].message.content == MOCK_CONTENT


def test_an_unavailable_scope_is_503_with_retry_after():
    for stream in (False, True):
        with pytest.raises(openai.InternalServerError) as e:
            r = client().chat.completions.create(
                model="DOWN", messages=[{"role": "user", "content": "x"}], stream=stream
            )
            list(r) if stream else r
        assert e.value.status_code == 503
        assert int(e.value.response.headers["retry-after"]) >= 1


def test_a_key_over_its_rpm_is_429():
    limited = client(os.environ["PGW_LIMITED_KEY"])
    limited.chat.completions.create(model="LLM", messages=[{"role": "user", "content": "1"}])
    with pytest.raises(openai.RateLimitError) as e:
        limited.chat.completions.create(model="LLM", messages=[{"role": "user", "content": "2"}])
    assert e.value.code == "key_rate_limited"
