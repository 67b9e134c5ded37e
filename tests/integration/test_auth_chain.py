"""The provider chain of ``[auth] providers`` with real paho-mqtt clients against
`ferromq serve`: a users file, then a custom provider loaded by ``[auth] hook``
(tests/support/auth_hook.py); a rejection ends the chain, "not mine" asks the next provider,
and nobody's client is refused; a hook that cannot be loaded stops the broker with
one line. Under uvloop and asyncio."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningBroker, start_broker
from tests.support.commands import run_cli, serve_error, users_add
from tests.support.paho_clients import connack

ROOT = Path(__file__).resolve().parents[2]  # so the broker imports tests.support.auth_hook
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}


def chain_config(users: Path, hook: str = "tests.support.auth_hook:TicketProvider") -> str:
    return f'[auth]\nusers_file = "{users}"\nproviders = ["users_file", "hook"]\nhook = "{hook}"\n'


@pytest.fixture(params=["uvloop", "asyncio"])
def chain_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    assert users_add(users, "sensor", "s3nsor pw").returncode == 0
    running = start_broker(tmp_path, request.param, chain_config(users), ENV)
    yield running
    running.stop()


@pytest.mark.parametrize("version", [4, 5])
def test_each_provider_answers_for_its_own_users(chain_broker: RunningBroker, version: int) -> None:
    assert connack(chain_broker, "sensor", "s3nsor pw", version) == "Success"
    assert connack(chain_broker, "ticket-7", "hook-pass", version) == "Success"
    # The users file rejects its user's wrong password: the hook is not asked.
    assert connack(chain_broker, "sensor", "hook-pass", version) == "Bad user name or password"
    # The users file passes an unknown name on; the hook refuses a wrong ticket.
    assert connack(chain_broker, "ticket-7", "guess", version) == "Not authorized"
    # Both pass: nobody's client.
    assert connack(chain_broker, "stranger", "pw", version) == "Bad user name or password"
    log = chain_broker.log()
    assert "username=ticket-7 client_type=application" in log
    assert "username=sensor client_type=device" in log


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_hook_is_found_by_its_entry_point(tmp_path: Path, loop: str) -> None:
    # An installed distribution declaring the entry point, as pip would leave it.
    dist = tmp_path / "site" / "ferromq_test_hooks-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ferromq-test-hooks\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[ferromq.auth_providers]\ntickets = tests.support.auth_hook:TicketProvider\n"
    )
    users = tmp_path / "users.toml"
    assert users_add(users, "sensor", "s3nsor pw").returncode == 0
    env = {"PYTHONPATH": os.pathsep.join([ENV["PYTHONPATH"], str(dist.parent)])}
    broker = start_broker(tmp_path, loop, chain_config(users, "tickets"), env)
    try:
        assert connack(broker, "ticket-1", "hook-pass", 5) == "Success"
        assert connack(broker, "ticket-1", "guess", 5) == "Not authorized"
    finally:
        broker.stop()


UNLOADABLE_HOOKS = [
    ("tests.no_such_module:X", "auth.hook: 'tests.no_such_module:X': cannot import"),
    ("tests.support.auth_hook:Missing", "tests.support.auth_hook has no attribute Missing"),
    ("tests.support.auth_hook:NOT_A_PROVIDER", "is neither a provider nor callable"),
    ("no-such-entry-point", "no entry point of that name in ferromq.auth_providers"),
]


@pytest.mark.parametrize(("hook", "message"), UNLOADABLE_HOOKS)
def test_a_hook_that_cannot_be_loaded_stops_serve(tmp_path: Path, hook: str, message: str) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "sensor", "pw").returncode == 0
    assert message in serve_error(tmp_path, chain_config(users, hook), ENV)


@pytest.mark.parametrize(("hook", "message"), UNLOADABLE_HOOKS)
def test_check_config_refuses_the_hooks_serve_cannot_load(
    tmp_path: Path, hook: str, message: str
) -> None:
    users = tmp_path / "users.toml"
    assert users_add(users, "sensor", "pw").returncode == 0
    config = tmp_path / "ferromq.toml"
    config.write_text(chain_config(users, hook))
    result = run_cli("check-config", "--config", str(config), env=ENV)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
