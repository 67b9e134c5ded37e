"""The ACL rules as users write them (ferromq.acl): the TOML rules file and
Mosquitto's acl_file compile, each mistake is one line naming the file, the line and
the problem, authentication answers' rules in their documented JSON shape, and
``check-config`` / ``serve`` refuse a bad rules file alike (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.commands import one_line_error
from tests.unit.test_cli import BOTH_COMMANDS, run_with

from ferromq.acl import binding_for, load_rules, rules_from_answer
from ferromq.auth.provider import Identity
from ferromq.config import AclConfig, ConfigError

GOOD_TOML = """\
[[rules]]
permission = "deny"
action = "publish"
topic = "secret/#"

[[rules]]
permission = "allow"
action = ["subscribe", "read"]
topics = ["users/%u/#", "tenants/%{tenant}/+"]
user = "alice"
"""


def load(tmp_path: Path, text: str, fmt: str = "toml") -> int:
    path = tmp_path / "acl"
    path.write_text(text)
    rules = load_rules(AclConfig(file=str(path), format=fmt))
    assert rules is not None
    return len(rules)


def error(tmp_path: Path, text: str, fmt: str = "toml") -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text, fmt)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_no_file_means_no_rules() -> None:
    assert load_rules(AclConfig()) is None


def test_a_toml_rules_file_compiles_one_rule_per_topic(tmp_path: Path) -> None:
    assert load(tmp_path, GOOD_TOML) == 3


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('permission = "maybe"\naction = "publish"\ntopic = "a"', "permission: expected"),
        ('permission = "allow"\naction = "write"\ntopic = "a"', "action: unknown action 'write'"),
        ('permission = "allow"\naction = "publish"\ntopic = "a/#/b"', "invalid topic filter"),
        ('permission = "allow"\naction = "publish"\ntopic = "a/%x"', "unknown placeholder"),
        ('permission = "allow"\naction = "publish"', "exactly one of topic and topics"),
        (
            'permission = "allow"\naction = "all"\ntopic = "a"\nuser = "u"\nclient_id = "c"',
            "user: a rule is for one of",
        ),
        ('permission = "allow"\naction = "all"\ntopic = "a"\ngroup = "g"', "group: unknown key"),
    ],
)
def test_a_bad_toml_rule_names_its_line(tmp_path: Path, table: str, problem: str) -> None:
    message = error(tmp_path, f"{GOOD_TOML}\n[[rules]]\n{table}\n")
    assert f"{tmp_path / 'acl'}:12: rules[2]." in message
    assert problem in message


def test_a_mosquitto_acl_file_maps_onto_rules(tmp_path: Path) -> None:
    text = (
        "# anonymous\ntopic read public/#\nuser alice\ntopic alice/#\n"
        "topic deny alice/secret\npattern write devices/%c/out\n"
    )
    assert load(tmp_path, text, "mosquitto") == 4


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("user alice\ntopic read a\ngroup x\n", 3, "unknown keyword 'group'"),
        ("topic read a/#/b\n", 1, "invalid topic filter"),
        ("\n\nuser\n", 3, "user needs a name"),
        ("pattern\n", 1, "needs a topic"),
    ],
)
def test_a_bad_mosquitto_line_is_named(tmp_path: Path, text: str, line: int, problem: str) -> None:
    message = error(tmp_path, text, "mosquitto")
    assert f"{tmp_path / 'acl'}:{line}:" in message
    assert problem in message


def test_rules_in_an_authentication_answer() -> None:
    rules = rules_from_answer(
        [{"permission": "allow", "action": "all", "topics": ["a/%u", "b/%{tenant}"]}]
    )
    assert rules is not None and len(rules) == 2
    assert rules_from_answer(None) is None
    with pytest.raises(ValueError, match="expected a list"):
        rules_from_answer({"pub": ["a"]})
    with pytest.raises(ValueError, match=r"acl\[0\]\.user: unknown key"):
        rules_from_answer([{"permission": "allow", "action": "all", "topic": "a", "user": "x"}])


def test_binding_keeps_string_and_integer_claims_only() -> None:
    identity = Identity("alice", acl=[], claims={"tenant": "t1", "n": 3, "ok": True, "l": [1]})
    binding_for(identity, "cn-1")  # a binding is opaque; the engine tests check its use
    with pytest.raises(ValueError):
        binding_for(Identity("alice", acl="allow everything"), None)


@BOTH_COMMANDS
def test_serve_and_check_config_refuse_a_bad_rules_file(tmp_path: Path, command: list[str]) -> None:
    rules = tmp_path / "acl.toml"
    rules.write_text('[[rules]]\npermission = "allow"\naction = "publish"\ntopic = "+x"\n')
    result = run_with(tmp_path, f'[acl]\nfile = "{rules}"\n', *command)
    one_line_error(result, 2, f"acl.file: {rules}:1: rules[0].topic", "invalid topic filter")
