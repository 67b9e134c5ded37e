"""The engine takes one ``EngineSettings``, built from the config schema only.

Defaults live in ``ferromq.config``; the binding requires every field, so there is no
second default to drift from the schema, and the names a setting is spelt with are
the core's (``ferromq_core::choice``).
"""

from __future__ import annotations

import inspect
from dataclasses import fields, replace

import pytest

from ferromq._core import EngineSettings
from ferromq.config import Config, SessionConfig
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
    config = replace(Config(), session=replace(SessionConfig(), **{setting: "x"}))
    with pytest.raises(ValueError, match=f"^{message}$"):
        engine_settings(config)
