"""The engine takes one ``EngineSettings``, built from the config schema only.

Defaults live in ``ferromq.config``; the binding requires every field, so there is no
second default to drift from the schema, and the names a setting is spelt with are
the core's (``ferromq_core::choice``).
"""

from __future__ import annotations

import inspect
from dataclasses import fields, replace
from typing import Any

import pytest

from ferromq._core import EngineSettings
from ferromq.config import Config, LimitsConfig, SessionConfig
from ferromq.engine import engine_settings


def test_the_binding_has_no_default_for_any_setting() -> None:
    parameters = inspect.signature(EngineSettings).parameters.values()
    with_default = [p.name for p in parameters if p.default is not inspect.Parameter.empty]
    assert with_default == []
    with pytest.raises(TypeError, match="max_packet_size"):
        EngineSettings()  # type: ignore[call-arg]


@pytest.mark.parametrize("setting", ["drop_policy", "share_strategy"])
def test_every_name_the_config_accepts_the_engine_accepts(setting: str) -> None:
    (field,) = [f for f in fields(SessionConfig) if f.name == setting]
    for name in field.metadata["kind"].options:
        config = replace(Config(), session=replace(SessionConfig(), **{setting: name}))
        assert isinstance(engine_settings(config), EngineSettings)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("drop_policy", 'unknown drop policy "x"; expected one of: drop_oldest, refuse_newest'),
        (
            "share_strategy",
            'unknown share strategy "x"; expected one of: '
            "round_robin, random, hash_client, hash_topic, sticky",
        ),
    ],
)
def test_a_name_the_engine_does_not_know_is_one_line_naming_the_choices(
    setting: str, message: str
) -> None:
    unknown: dict[str, Any] = {setting: "x"}
    config = replace(Config(), session=replace(SessionConfig(), **unknown))
    with pytest.raises(ValueError, match=f"^{message}$"):
        engine_settings(config)


def test_the_limits_largest_values_fit_the_engine() -> None:
    # Every [limits]/[session] key of issue 13 at the top of its range: the schema's
    # ranges must be ones the engine's integer types hold.
    def top(cls: type, name: str) -> int:
        (field,) = [f for f in fields(cls) if f.name == name]
        high = field.metadata["kind"].high
        assert isinstance(high, int)
        return high

    limits: dict[str, Any] = {
        name: top(LimitsConfig, name)
        for name in (
            "max_publish_rate",
            "max_publish_bytes_rate",
            "max_publish_rate_per_user",
            "max_publish_bytes_rate_per_user",
            "max_subscriptions_per_client",
            "max_retained_messages",
            "max_retained_bytes",
            "max_retained_messages_per_user",
            "max_retained_bytes_per_user",
            "retained_max_expiry",
        )
    }
    session: dict[str, Any] = {
        name: top(SessionConfig, name) for name in ("max_queued_bytes", "memory_budget")
    }
    config = replace(
        Config(),
        limits=replace(Config().limits, **limits),
        session=replace(SessionConfig(), **session),
    )
    assert isinstance(engine_settings(config), EngineSettings)
