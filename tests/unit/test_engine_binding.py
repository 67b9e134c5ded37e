"""The engine's Python entry points refuse bad input with ValueError, never a panic."""

from __future__ import annotations

import pytest

from ferromq._core import Engine


@pytest.mark.parametrize(
    ("topic", "problem"),
    [("a/+", "wildcard"), ("", "empty"), ("a\0b", r"U\+0000")],
)
def test_publish_refuses_an_invalid_topic(topic: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Engine().publish(topic, b"x")


def test_publish_reaches_no_one_without_subscribers() -> None:
    assert Engine().publish("a/b", b"x", qos=1) == 0
