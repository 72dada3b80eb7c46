"""The unchanged OpenAI Python SDK against `polygateway serve` (started by run.sh over the mock
upstreams): chat, streaming, embeddings, models, errors and virtual keys."""

import os

import openai
import pytest

BASE = os.environ["PGW_BASE_URL"] + "/v1"
KEY = os.environ["PGW_KEY"]
MOCK_CONTENT = "Hello from the mock upstream."


def client(key=KEY):
    # No SDK retries: every error must be the server's first answer.
    return openai.OpenAI(base_url=BASE, api_key=key, max_retries=0, timeout=30)


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
            model="LLM", messages=[{"role": "user", "content": "x"}], n=2
        )
    assert e.value.param == "n"


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
