"""The engine's events are the same list on both sides of the binding.

The binding registers one class per variant of the core's ``Event`` (an exhaustive
match converts them) and exports the list as the runtime union ``EngineEvent``; the
stub declares the ``EngineEvent`` alias that mypy checks every consumer against
(``match`` in broker.py is exhaustive), and stubtest checks each class's attributes.
This test closes the loop: both unions name the same classes, so an event added on
one side only fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import ferromq
from ferromq import _core

STUB = Path(ferromq.__file__).with_name("_core.pyi")


def _union_members(node: ast.expr) -> list[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    assert isinstance(node, ast.Name), ast.dump(node)
    return [node.id]


def stub_event_names() -> list[str]:
    for statement in ast.parse(STUB.read_text()).body:
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id == "EngineEvent"
            and statement.value is not None
        ):
            return _union_members(statement.value)
    raise AssertionError(f"{STUB} declares no EngineEvent alias")


def test_the_stubs_event_union_names_the_bindings_event_classes() -> None:
    assert [cls.__name__ for cls in get_args(_core.EngineEvent)] == stub_event_names()


def test_every_event_class_is_exported_by_the_module() -> None:
    for cls in get_args(_core.EngineEvent):
        assert getattr(_core, cls.__name__) is cls
        assert cls.__module__ == "ferromq._core"
