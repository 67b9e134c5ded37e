"""What a clustered node says about its cluster: the members and their states (from
:class:`~ferromq.cluster.membership.Membership`, read from Redis) and this node's own
:class:`~ferromq.cluster.figures.ClusterFigures`.

One :func:`cluster_report` serves every reader: ``GET /api/v1/cluster`` and ``ferromq
ctl cluster`` (:meth:`ClusterReport.to_json`), ``/metrics``
(:mod:`ferromq.admin.cluster`) and the ``$SYS/broker/cluster/`` topics
(:func:`sys_messages`: ``node_id`` and ``nodes/alive``, ``nodes/dead``,
``nodes/adopted``, the count of members in each state). The members are read per
request or per ``$SYS`` interval, bounded by :data:`READ_TIMEOUT`; a Redis that does
not answer leaves them unknown (None) and the figures are still reported.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Final, Protocol, get_args

from redis.exceptions import RedisError

from ferromq.cluster.figures import ClusterFigures
from ferromq.cluster.membership import Membership, MemberState, State
from ferromq.cluster.names import node_of

__all__ = [
    "READ_TIMEOUT",
    "STATES",
    "ClusterReport",
    "ClusterView",
    "cluster_report",
    "member_json",
    "sys_messages",
]

READ_TIMEOUT: Final = 5.0
"""Seconds the members have to be read from Redis."""

STATES: Final[tuple[State, ...]] = get_args(State)


class ClusterView(Protocol):
    """What the admin side reads of a clustered node (``Broker.cluster``)."""

    @property
    def node_id(self) -> str: ...

    @property
    def membership(self) -> Membership: ...

    def figures(self) -> ClusterFigures: ...


def member_json(member: MemberState) -> dict[str, object]:
    info = member.info
    return {
        "node_id": info.node_id,
        "node": node_of(info.node_id),
        "state": member.state,
        "adopted_by": member.adopted_by,
        "started": info.started,
        "pid": info.pid,
        "mqtt": list(info.mqtt),
        "admin": info.admin,
        "version": info.version,
        "figures": dict(member.figures),
    }


@dataclass(frozen=True)
class ClusterReport:
    node_id: str
    members: list[MemberState] | None
    """Every member by node id; None when Redis could not be read (:attr:`error`)."""
    figures: ClusterFigures
    error: str | None = None

    def counts(self) -> dict[State, int]:
        """Members in each state (empty when they are unknown)."""
        if self.members is None:
            return {}
        return {state: sum(m.state == state for m in self.members) for state in STATES}

    def totals(self) -> dict[str, int]:
        """The alive nodes' figures added up: the cluster's clients, messages and
        subscriptions as of their last heartbeats (empty when members are unknown)."""
        totals: dict[str, int] = {}
        for member in self.members or ():
            for name, value in member.figures.items():
                totals[name] = totals.get(name, 0) + value
        return totals

    def to_json(self) -> dict[str, object]:
        """The API's answer (members known)."""
        assert self.members is not None, "members unknown"
        return {
            "node_id": self.node_id,
            "nodes": [member_json(member) for member in self.members],
            "figures": asdict(self.figures),
            "totals": self.totals(),
        }


async def cluster_report(cluster: ClusterView) -> ClusterReport:
    """The members now (from Redis) and this node's figures."""
    figures = cluster.figures()
    try:
        members = await asyncio.wait_for(cluster.membership.members(), READ_TIMEOUT)
    except (RedisError, OSError, asyncio.TimeoutError) as exc:
        error = f"cluster members unreadable in Redis: {exc!r}"
        return ClusterReport(cluster.node_id, None, figures, error)
    return ClusterReport(cluster.node_id, members, figures)


def sys_messages(report: ClusterReport, prefix: str) -> list[tuple[str, bytes]]:
    """The ``<prefix>cluster/...`` topics and payloads of one ``$SYS`` interval."""
    base = prefix + "cluster/"
    messages = [(base + "node_id", node_of(report.node_id).encode())]
    messages += [
        (f"{base}nodes/{state}", str(count).encode()) for state, count in report.counts().items()
    ]
    messages += [
        (f"{base}totals/{name}", str(value).encode()) for name, value in report.totals().items()
    ]
    return messages
