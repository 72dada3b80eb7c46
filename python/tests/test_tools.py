"""The chat protocol from Python: tools and OpenAI keywords passed through, tool calls, finish
reason, refusal-free answers, logprobs and n choices on the response, tool-call pieces on the
stream. The mock upstream answers from the request: with ``tools`` it calls them (arguments
``{"query": <last message>}``), after a ``tool`` message it answers ``tool said: …``."""

from __future__ import annotations

import json

from polygateway import GatewayClient, ToolCall
from conftest import llm_env, run

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
ASK = [{"role": "user", "content": "weather?"}]


def call(mock, messages, stream=True, **kwargs):
    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        try:
            return await client.chat(messages, stream=stream, **kwargs)
        finally:
            await client.aclose()

    return run(scenario())


def test_tools_pass_through_and_tool_calls_come_back(mock):
    for stream in (True, False):
        r = call(mock, ASK, stream=stream, tools=[WEATHER, CLOCK], tool_choice="auto",
                 parallel_tool_calls=True, seed=7)
        sent = mock.request_bodies()[-1]
        assert sent["tools"] == [WEATHER, CLOCK]
        assert (sent["tool_choice"], sent["parallel_tool_calls"], sent["seed"]) == ("auto", True, 7)
        assert r.finish_reason == "tool_calls"
        assert r.content == ""
        assert [c.name for c in r.tool_calls] == ["get_weather", "get_time"]
        assert r.tool_calls[0] == ToolCall("call_0", "function", "get_weather",
                                           json.dumps({"query": "weather?"}, separators=(",", ":")))


def test_a_multi_turn_tool_conversation_reaches_the_upstream_as_written(mock):
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "-3C"},
    ]
    r = call(mock, history, tools=[WEATHER])
    assert mock.request_bodies()[-1]["messages"] == history
    assert r.content == "tool said: -3C"
    assert r.finish_reason == "stop" and r.tool_calls == ()


def test_logprobs_n_and_length(mock):
    r = call(mock, ASK, logprobs=True, n=2)
    assert "".join(t["token"] for t in r.logprobs["content"]) == r.content
    assert len(r.other_choices) == 1 and r.other_choices[0]["content"].startswith("[1] ")
    r = call(mock, ASK, max_tokens=1)
    assert r.finish_reason == "length"
    assert mock.request_bodies()[-1]["max_tokens"] == 1


def test_chat_stream_yields_tool_call_pieces(mock):
    async def scenario():
        client = GatewayClient.from_settings(llm_env(mock.base_url))
        stream = client.chat_stream(ASK, tools=[WEATHER])
        deltas = [d async for d in stream]
        await client.aclose()
        return deltas, stream.response

    deltas, response = run(scenario())
    pieces = [p for d in deltas for p in d.tool_calls]
    assert pieces[0].id == "call_0" and pieces[0].name == "get_weather"
    assert "".join(p.arguments for p in pieces) == response.tool_calls[0].arguments
    assert response.finish_reason == "tool_calls"


def test_a_structured_call_answered_with_tool_calls_returns_them_as_is(mock):
    """``structured=`` reads text answers only: tool calls come back on the response, unrepaired
    and never re-asked, ``structured_data`` None."""
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        celsius: float

    for structured in ("json", Weather):
        before = len(mock.request_bodies())
        r = call(mock, ASK, structured=structured, tools=[WEATHER])
        assert len(mock.request_bodies()) == before + 1, "no re-ask"
        assert r.structured_data is None
        assert [c.name for c in r.tool_calls] == ["get_weather"]
        assert json.loads(r.tool_calls[0].arguments) == {"query": "weather?"}
        assert r.finish_reason == "tool_calls"


def test_a_tool_loop_appends_the_answer_with_to_message(mock):
    first = call(mock, ASK, tools=[WEATHER])
    turn = first.to_message()
    assert turn["role"] == "assistant" and turn["content"] is None
    assert [c["function"]["name"] for c in turn["tool_calls"]] == ["get_weather"]
    # Thinking blocks from a native-dialect source ride on the turn; OpenAI chat leaves them out.
    turn["thinking_blocks"] = [{"type": "thinking", "thinking": "Look it up.", "signature": "sig"}]
    history = ASK + [turn, {"role": "tool", "tool_call_id": turn["tool_calls"][0]["id"],
                            "content": "-3C"}]
    second = call(mock, history, tools=[WEATHER])
    sent = mock.request_bodies()[-1]["messages"]
    assert "thinking_blocks" not in sent[1]
    assert sent[1]["tool_calls"] == turn["tool_calls"]
    assert second.content == "tool said: -3C"
    assert second.to_message() == {"role": "assistant", "content": "tool said: -3C"}
    assert second.thinking_blocks == () and second.cache_write_5m_tokens is None
