"""The original library's documented API: version, settings / source / profile / pricing types,
the injection keywords of ``from_env`` / ``from_settings``, ``EmbeddingResponse.cost`` and
``OcrLayoutElement.type``."""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
from dataclasses import replace

import pytest

import polygateway
from polygateway import (
    DEFAULT_PROFILES,
    AllSourcesExhausted,
    ConfigError,
    EmbeddingClient,
    EmbeddingSettings,
    GatewayClient,
    GatewaySettings,
    ModelPrice,
    OcrSettings,
    PricingTable,
    ProviderProfile,
    SourceConfig,
)
from polygateway.ocr import OcrClient, OcrLayoutElement, OcrLayoutResult, OcrTextResult
from polygateway.testing import mock_env
from conftest import llm_env, run

HI = [{"role": "user", "content": "hi"}]
PNG = b"\x89PNG\r\n\x1a\n a scanned page"


async def _until(predicate, what: str, polls: int = 500):
    """Poll an eventually-true condition (bounded; not a timing assertion)."""
    for _ in range(polls):
        if predicate():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never happened: {what}")


def test_version_is_the_crates():
    # The installed distribution's version is the one maturin took from the crate (the tests
    # run from a copy outside the checkout, against the installed wheel).
    assert polygateway.__version__ == importlib.metadata.version("polygateway")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", polygateway.__version__)
    assert "__version__" in polygateway.__all__


def _source(base_url: str, **extra) -> SourceConfig:
    return SourceConfig(name="openai_1", base_url=base_url, api_key="sk-test", model="test-model",
                        timeout_s=30, **extra)


def _settings(base_url: str, **extra) -> GatewaySettings:
    return GatewaySettings(scope="LLM", sources=(_source(base_url),), limiter_backend="memory",
                           breaker_backend="memory", cache_backend="none",
                           telemetry_backend="none", **extra)


def test_source_config_checks_its_invariants():
    url = "http://127.0.0.1:1/v1"
    source = _source(url, tpm=6000)
    assert (source.provider, source.effective_est_tokens()) == ("openai", 100)
    assert _source(url, tpm=6000, est_tokens=500).effective_est_tokens() == 500
    assert _source(url).effective_est_tokens() == 0
    assert "sk-test" not in repr(source)
    for bad, word in [
        (dict(ttft_timeout_s=10), "together"),
        (dict(ttft_timeout_s=10, inter_token_timeout_s=20), "inter_token_timeout_s"),
        (dict(ttft_timeout_s=40, inter_token_timeout_s=5), "timeout_s"),
        (dict(rpm=-1), "rpm"),
        (dict(extra_body={"model": "x"}), "model"),
        (dict(missing_done="ignore"), "missing_done"),
    ]:
        with pytest.raises(ValueError, match=word):
            _source(url, **bad)
    with pytest.raises(ValueError, match="provider"):
        SourceConfig(name="openai", base_url=url, api_key="k", model="m")
    with pytest.raises(ValueError, match="api_key"):
        SourceConfig(name="openai_1", base_url=url, api_key="", model="m")


def test_settings_render_the_original_keys_and_build_a_client(mock):
    settings = _settings(mock.base_url, max_attempts=2, circuit_open="wait")
    env = settings.to_env()
    assert env["LLM__OPENAI__1__TIMEOUT_S"] == "30"
    assert env["LLM__RETRY__MAX_ATTEMPTS"] == "2" and env["LLM__CIRCUIT_OPEN"] == "wait"
    assert env["PGW_CACHE_BACKEND"] == "none"

    async def scenario():
        client = GatewayClient.from_settings(settings)
        try:
            return client.scope, await client.chat(HI)
        finally:
            await client.aclose()

    scope, response = run(scenario())
    assert scope == "LLM" and response.source_name == "openai_1"


def test_settings_are_refused_like_the_environment_they_stand_for(mock):
    with pytest.raises(ConfigError, match="PGW_CACHE_NAMESPACE"):
        GatewayClient.from_settings(replace(_settings(mock.base_url), cache_backend="memory"))
    with pytest.raises(ValueError, match="batch_size"):
        EmbeddingSettings(scope="EMBED", sources=(_source(mock.base_url),),
                          limiter_backend="memory", breaker_backend="memory",
                          cache_backend="none", telemetry_backend="none")
    with pytest.raises(ValueError, match="PGW_TELEMETRY_BACKEND"):
        GatewaySettings(scope="LLM", sources=(_source(mock.base_url),), limiter_backend="memory",
                        breaker_backend="memory", cache_backend="none", telemetry_backend=None)


def test_embedding_and_ocr_settings_build_their_clients(mock, ocr_mock):
    embed = EmbeddingSettings(scope="EMBED", sources=(_source(mock.base_url),),
                              limiter_backend="memory", breaker_backend="memory",
                              cache_backend="none", telemetry_backend="none", batch_size=2)
    monkey = SourceConfig(name="monkey_1", base_url=ocr_mock.base_url, api_key="none",
                          model="monkeyocr", timeout_s=30)
    ocr = OcrSettings(scope="OCR", sources=(monkey,), limiter_backend="memory",
                      breaker_backend="memory", cache_backend="none", telemetry_backend="none")

    async def scenario():
        e = EmbeddingClient.from_settings(embed)
        o = OcrClient.from_settings(ocr)
        try:
            return await e.embed(["a", "b", "c"]), await o.recognize_text(PNG)
        finally:
            await e.aclose()
            await o.aclose()

    vectors, text = run(scenario())
    assert len(vectors.vectors) == 3 and mock.counts()["embeddings"] == 2
    assert isinstance(text, OcrTextResult) and text.text


def test_layout_elements_have_the_originals_type_field(ocr_mock):
    async def scenario():
        client = OcrClient.from_settings(mock_env("OCR", ocr_mock.base_url))
        try:
            return await client.parse_layout(PNG)
        finally:
            await client.aclose()

    layout = run(scenario())
    assert isinstance(layout, OcrLayoutResult) and len(layout) > 0
    for element in layout:
        assert isinstance(element, OcrLayoutElement)
        assert isinstance(element.type, str) and element.type
        assert element.kind == element.type  # the earlier name stays an alias


def test_embedding_response_cost_comes_from_the_pricing_table(mock, tmp_path):
    table = PricingTable({"test-model": ModelPrice(input_per_1m=2.0, output_per_1m=8.0)})
    path = table.save(tmp_path / "prices.json")
    assert PricingTable.load(path) == table

    async def embed(env):
        client = EmbeddingClient.from_settings(env)
        try:
            return await client.embed(["one", "two"])
        finally:
            await client.aclose()

    priced = run(embed(mock_env("EMBED", mock.base_url, PGW_PRICING_PATH=path)))
    assert priced.prompt_tokens > 0
    assert priced.cost == pytest.approx(priced.prompt_tokens * 2.0 / 1e6)
    assert priced.cost == pytest.approx(table.cost("test-model", priced.prompt_tokens, 0))
    assert run(embed(mock_env("EMBED", mock.base_url))).cost is None


def test_default_profiles_are_the_runtimes():
    deepseek = DEFAULT_PROFILES["deepseek"]
    assert deepseek.thinking_on == {"thinking": {"type": "enabled"}}
    assert deepseek.thinking_off == {"thinking": {"type": "disabled"}}
    assert DEFAULT_PROFILES["minimax"].reasoning == "think_tags"
    assert DEFAULT_PROFILES["openai"].thinking_on == {}
    with pytest.raises(ValueError, match="reasoning"):
        ProviderProfile("x", reasoning="tags")


def test_registry_adds_a_provider(mock):
    mylab = ProviderProfile("mylab", thinking_on={"reasoning": {"effort": "high"}},
                            thinking_off={"reasoning": {"effort": "none"}}, reasoning="field")
    env = mock_env("LLM", mock.base_url)
    env = {k.replace("__OPENAI__", "__MYLAB__"): v for k, v in env.items()}
    env["LLM__MYLAB__1__ENABLE_THINKING"] = "true"

    async def chat(**kwargs):
        client = GatewayClient.from_settings(env, **kwargs)
        try:
            await client.chat(HI)
        finally:
            await client.aclose()

    run(chat())
    assert "reasoning" not in mock.request_bodies()[-1]  # unknown provider: generic profile
    run(chat(registry={**DEFAULT_PROFILES, "mylab": mylab}))
    assert mock.request_bodies()[-1]["reasoning"] == {"effort": "high"}


def test_injected_limiter_is_shared_between_clients(mock):
    mock.set_behaviour("slow", delay_ms=400)
    env = llm_env(mock.base_url, LLM__OPENAI__1__MAX_CONCURRENCY=1, LLM__QUOTA_FULL="fail_fast")

    async def second_call_while_first_holds_the_slot(share: bool):
        first = GatewayClient.from_settings(env)
        kwargs = dict(limiter=first.limiter, breaker=first.breaker) if share else {}
        second = GatewayClient.from_settings(env, **kwargs)
        try:
            held = asyncio.ensure_future(first.chat(HI))
            await _until(lambda: mock.in_flight == 1, "the first call reached the upstream")
            try:
                await second.chat(HI)
                outcome = "served"
            except AllSourcesExhausted as exc:
                outcome = exc.reason
            await held
            return outcome
        finally:
            await first.aclose()
            await second.aclose()

    assert run(second_call_while_first_holds_the_slot(share=False)) == "served"
    assert run(second_call_while_first_holds_the_slot(share=True)) == "quota_exhausted"


def test_injection_that_cannot_be_honoured_names_the_alternative(mock):
    env = llm_env(mock.base_url)
    first = GatewayClient.from_settings(env)
    try:
        with pytest.raises(ConfigError, match="breaker="):
            GatewayClient.from_settings(env, limiter=first.limiter)
        with pytest.raises(ConfigError, match="PGW_CACHE_BACKEND=redis"):
            GatewayClient.from_env("LLM", env=env, cache=object())
        with pytest.raises(ConfigError, match="PGW_TELEMETRY_"):
            GatewayClient.from_env("LLM", env=env, telemetry=object())
        redis_env = llm_env(mock.base_url, PGW_LIMITER_BACKEND="redis",
                            PGW_BREAKER_BACKEND="redis", REDIS_URL="redis://127.0.0.1:6379")
        with pytest.raises(ValueError, match="REDIS_URL"):
            GatewayClient.from_settings(redis_env, limiter=first.limiter, breaker=first.breaker)
    finally:
        run(first.aclose())


def test_pricing_table_refuses_bad_prices_naming_the_model(tmp_path):
    with pytest.raises(ValueError, match="'m'.*input_per_1m"):
        PricingTable({"m": {"input_per_1m": -1, "output_per_1m": 1}})
    bad = tmp_path / "prices.json"
    bad.write_text('{"m": {"input_per_1m": 1, "output_per_1m": "free"}}')
    with pytest.raises(ValueError, match="output_per_1m"):
        PricingTable.load(bad)
    price = ModelPrice(input_per_1m=2.0, output_per_1m=8.0, cached_input_per_1m=0.5)
    # (600k uncached · 2 + 400k cached · 0.5 + 1M · 8) / 1M, the runtime's formula.
    assert price.cost(1_000_000, 1_000_000, 400_000) == pytest.approx(1.2 + 0.2 + 8.0)


def test_cache_write_prices_by_lifetime_round_trip_and_price_writes(tmp_path):
    claude = ModelPrice(input_per_1m=3.0, output_per_1m=15.0, cached_input_per_1m=0.3,
                        cache_write_5m_per_1m=3.75, cache_write_1h_per_1m=6.0)
    table = PricingTable({"c": claude})
    assert PricingTable.load(table.save(tmp_path / "p.json")) == table
    # 10k prompt tokens: 6k read, 2k written for 5 min, 1k for 1 h, 1k plain; 100 out.
    expected = (1_000 * 3.0 + 6_000 * 0.3 + 2_000 * 3.75 + 1_000 * 6.0 + 100 * 15.0) / 1e6
    assert table.cost("c", 10_000, 100, 6_000, 2_000, 1_000) == pytest.approx(expected)
    # Without write prices, writes cost plain input.
    plain = ModelPrice(input_per_1m=3.0, output_per_1m=15.0)
    assert plain.cost(10_000, 0, 0, 2_000) == pytest.approx(10_000 * 3.0 / 1e6)
    with pytest.raises(ValueError, match="cache_write_1h_per_1m"):
        ModelPrice(input_per_1m=1.0, output_per_1m=1.0, cache_write_1h_per_1m=-2)


def test_chat_takes_priority_deadline_and_weight_and_refuses_bad_ones(mock):
    settings = _settings(mock.base_url)

    async def scenario():
        client = GatewayClient.from_settings(settings)
        try:
            ok = await client.chat(HI, priority="interactive", deadline_s=30.0, weight=2,
                                   tenant_id="acme")
            errors = []
            for kwargs in ({"priority": "urgent"}, {"deadline_s": 0.0}, {"weight": 0}):
                with pytest.raises(ValueError) as caught:
                    await client.chat(HI, **kwargs)
                errors.append(str(caught.value))
            return ok, errors
        finally:
            await client.aclose()

    ok, errors = run(scenario())
    assert ok.source_name == "openai_1"
    assert "use interactive, normal or batch" in errors[0]
    assert "deadline must be a positive number of seconds" in errors[1]
    assert "weight must be a whole number from 1 to 1000, got 0" in errors[2]
