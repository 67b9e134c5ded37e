"""The unions that cross the binding are the same list on both sides.

The binding registers one class per variant of a core enum (an exhaustive ``match``
converts them: a new core variant does not compile without its class) and exports
the list as a runtime union: ``EngineEvent`` (``Engine.take_events``) and
``ApplicationOp`` (``JournalSplitter.split``). The stub declares the same aliases,
which mypy checks every consumer against (``match`` in broker.py is exhaustive), and
stubtest checks each class's attributes. This test closes the loop: each stub alias
names exactly the runtime union's classes, so a class added on one side only fails
here.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

import ferromq
from ferromq import _core

STUB = Path(ferromq.__file__).with_name("_core.pyi")
UNIONS = ["EngineEvent", "ApplicationOp"]


def _union_members(node: ast.expr) -> list[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    assert isinstance(node, ast.Name), ast.dump(node)
    return [node.id]


def stub_union(name: str) -> list[str]:
    for statement in ast.parse(STUB.read_text()).body:
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id == name
            and statement.value is not None
        ):
            return _union_members(statement.value)
    raise AssertionError(f"{STUB} declares no {name} alias")


@pytest.mark.parametrize("name", UNIONS)
def test_the_stubs_alias_names_the_bindings_classes(name: str) -> None:
    runtime = [cls.__name__ for cls in get_args(getattr(_core, name))]
    assert runtime == stub_union(name)


@pytest.mark.parametrize("name", UNIONS)
def test_every_member_class_is_exported_by_the_module(name: str) -> None:
    for cls in get_args(getattr(_core, name)):
        assert getattr(_core, cls.__name__) is cls
        assert cls.__module__ == "ferromq._core"
