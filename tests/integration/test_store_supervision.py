"""The store writer is supervised: a real broker whose file descriptors run out while
it compacts its embedded store (``prlimit`` lowers its open-files limit below the
next free descriptor) logs the failure at once with its cause, reports it in
``$SYS/broker/store/``, keeps acknowledging QoS 1 messages (appending needs no new
descriptor), compacts once the limit is back (the retry comes with or without
traffic), and after a restart nothing it acknowledged is missing."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
from pathlib import Path

from tests.conftest import RunningBroker, start_broker
from tests.integration.test_embedded_store import persistent_subscriber, queued_payloads
from tests.support.mqtt_raw import RawClient
from tests.support.store_layout import store_pid, sys_tree_of

PAYLOAD = b"x" * 200


def broker_on(store: Path, tmp_path: Path, loop: str) -> RunningBroker:
    return start_broker(
        tmp_path,
        loop,
        env={
            "FERROMQ_STORAGE__PATH": str(store),
            "FERROMQ_STORAGE__COMPACT_AFTER": "4KiB",
            "FERROMQ_SYS__INTERVAL": "1",
            "FERROMQ_SESSION__QUEUE_LIMIT": "60000",
        },
    )


def set_open_files_limit(pid: int, soft: int) -> None:
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={soft}:"], check=True)


def lowest_free_descriptor(pid: int) -> int:
    used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    return min(set(range(len(used) + 1)) - used)


class Publisher:
    """QoS 1 publishes, each waited for: the acknowledged payloads."""

    def __init__(self, broker: RunningBroker) -> None:
        self.client = RawClient(broker.host, broker.port, version=4)
        self.client.connect("publisher")
        self.acked: list[bytes] = []

    def publish(self) -> None:
        """One QoS 1 message; its PUBACK must come."""
        payload = b"%06d" % len(self.acked) + PAYLOAD
        packet_id = len(self.acked) % 60000 + 1
        self.client.send({"type": "publish", "topic": "plant/a", "qos": 1,
                          "packet_id": packet_id, "payload": payload})  # fmt: skip
        ack = self.client.recv()
        assert (ack["type"], ack["packet_id"]) == ("puback", packet_id), ack
        self.acked.append(payload)

    def publish_until(self, broker: RunningBroker, pattern: str, limit: int = 3000) -> None:
        """Publish until the broker's log matches ``pattern``."""
        for _ in range(limit):
            if re.search(pattern, broker.log()):
                return
            self.publish()
        raise AssertionError(f"no {pattern!r} in the log:\n{broker.log()}")


def wait_for_store_state(
    watcher: RawClient, topic: str, wanted: bytes, timeout: float = 10.0
) -> None:
    """Until ``topic`` (a ``store/state`` in ``$SYS``) says ``wanted`` (published
    every second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        packet = watcher.recv(timeout=deadline - time.monotonic())
        if packet.get("topic") == topic and packet["payload"] == wanted:
            return
    raise AssertionError(f"{topic} never became {wanted!r}")


def test_compaction_failing_for_lack_of_descriptors_is_logged_and_survived(
    tmp_path: Path, loop: str
) -> None:
    store = tmp_path / "data"
    broker = broker_on(store, tmp_path, loop)
    pid = store_pid(broker, "keeper")  # whose journal compacts
    state = sys_tree_of("keeper") + "store/state"
    soft, _ = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    try:
        persistent_subscriber(broker, "keeper", "plant/#").close()
        watcher = RawClient(broker.host, broker.port, version=4)
        watcher.connect("watcher")
        watcher.send({"type": "subscribe", "packet_id": 1,
                      "filters": [{"filter": state, "qos": 0}]})  # fmt: skip
        assert watcher.recv()["type"] == "suback"
        publisher = Publisher(broker)
        publisher.publish_until(broker, "store compacted")

        set_open_files_limit(pid, lowest_free_descriptor(pid))
        publisher.publish_until(broker, "store compaction failed")
        failure = next(line for line in broker.log().splitlines() if "compaction failed" in line)
        assert "Too many open files" in failure, failure
        wait_for_store_state(watcher, state, b"failing")
        for _ in range(50):
            publisher.publish()  # acknowledged while compaction fails

        set_open_files_limit(pid, soft)
        publisher.publish_until(broker, "store recovered")
        wait_for_store_state(watcher, state, b"ok")
        publisher.client.close()
        watcher.close()
    finally:
        assert broker.stop() == 0, broker.log()
    assert "Traceback" not in broker.log()

    broker = broker_on(store, tmp_path, loop)
    try:
        received = queued_payloads(broker, "keeper")
    finally:
        assert broker.stop() == 0
    assert received == publisher.acked
