"""Provider profiles: what differs between OpenAI-compatible providers, as explicit entries (the
original library's ``ProviderProfile`` / ``DEFAULT_PROFILES``).

A profile is looked up by a source's provider name (``LLM__DEEPSEEK__1__…`` → ``deepseek``),
never guessed from the model string. Add a provider by passing a profile to the clients::

    mylab = ProviderProfile("mylab", thinking_on={"reasoning": {"effort": "high"}},
                            thinking_off={"reasoning": {"effort": "none"}})
    client = GatewayClient.from_env("LLM", registry={**DEFAULT_PROFILES, "mylab": mylab})

Profiles given there are added to the built-in ones (an entry with a built-in name replaces it);
an unknown provider uses the generic profile (no thinking switch, reasoning read from either
place).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Tuple, Union

from . import _native

__all__ = ["ProviderProfile", "DEFAULT_PROFILES"]

_REASONING = ("field", "think_tags", "both")


@dataclass(frozen=True)
class ProviderProfile:
    """One provider's wire peculiarities.

    ``thinking_on`` / ``thinking_off``: the keys merged into the request body when a source sets
    ``ENABLE_THINKING=true`` / ``false`` (both empty: the provider has no switch, nothing is
    injected). ``reasoning``: where the thinking stream arrives — ``field``
    (``reasoning_content``), ``think_tags`` (``<think>…</think>`` inside ``content``, moved into
    ``thinking``) or ``both``. ``native_json_schema`` / ``json_object``: which
    ``response_format`` the provider accepts natively (structured output picks its strategy
    from them); ``schema_under_value``: the schema goes as ``{"type": "json", "value": …}``
    (text-generation-inference).
    """

    name: str
    thinking_on: Mapping[str, Any] = field(default_factory=dict)
    thinking_off: Mapping[str, Any] = field(default_factory=dict)
    reasoning: str = "both"
    native_json_schema: bool = False
    json_object: bool = False
    schema_under_value: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("ProviderProfile.name must be a non-empty provider name")
        object.__setattr__(self, "name", self.name.lower())
        for which in ("thinking_on", "thinking_off"):
            value = getattr(self, which)
            if not isinstance(value, Mapping):
                raise TypeError(f"ProviderProfile.{which} must be a dict of request-body keys")
            object.__setattr__(self, which, MappingProxyType(dict(value)))
        if self.reasoning not in _REASONING:
            raise ValueError(
                f"ProviderProfile.reasoning {self.reasoning!r} is not one of {', '.join(_REASONING)}"
            )

    def _native(self) -> Tuple[str, str, str, str, bool, bool, bool]:
        return (
            self.name,
            json.dumps(dict(self.thinking_on)),
            json.dumps(dict(self.thinking_off)),
            self.reasoning,
            bool(self.native_json_schema),
            bool(self.json_object),
            bool(self.schema_under_value),
        )


def _from_native(entry: Tuple[str, str, str, str, bool, bool, bool]) -> ProviderProfile:
    name, on, off, reasoning, native, json_object, under_value = entry
    return ProviderProfile(name, json.loads(on), json.loads(off), reasoning, native, json_object,
                           under_value)


DEFAULT_PROFILES: Mapping[str, ProviderProfile] = MappingProxyType(
    {p.name: p for p in map(_from_native, _native.default_profiles())}
)
"""The runtime's built-in profiles by name (read-only)."""

Registry = Union[Mapping[str, ProviderProfile], Iterable[ProviderProfile]]


def registry_args(registry: Registry) -> list:
    """The profiles of a ``registry=`` argument, for the extension module."""
    profiles = registry.values() if isinstance(registry, Mapping) else registry
    out = []
    for profile in profiles:
        if not isinstance(profile, ProviderProfile):
            raise TypeError(
                "registry must map provider names to ProviderProfile (e.g. "
                "{**DEFAULT_PROFILES, 'mylab': ProviderProfile('mylab', …)})"
            )
        out.append(profile._native())
    return out
