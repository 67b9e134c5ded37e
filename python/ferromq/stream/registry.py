"""Registering ``record-v1`` with a schema registry (``[stream.kafka] registry``).

Once at start, before the Kafka sink sends anything, each subject the sink writes to
(``registry_subject`` with ``{topic}`` replaced, by default ``<topic>-value``: Confluent's
TopicNameStrategy) gets the schema through the Confluent-compatible REST API that
Confluent's registry, Apicurio Registry (``/apis/ccompat/v7``) and Karapace serve::

    POST {registry}/subjects/{subject}/versions
    {"schema": "<record-v1.avsc>", "schemaType": "AVRO"}   ->   {"id": N}

Registering a schema the subject already has returns its id again, so every start (and
every shard of a node) asks, and gets the same id. The id then goes to the Rust
encoder (``kafka_record_batches(..., schema_id=N)``), which writes each record value as
magic byte 0, ``N`` big-endian in 4 bytes, the Avro body: no Python per record.

A registry that cannot be reached or refuses the schema is :class:`RegistryError`, whose
message names the registry, its URL and the reason in one line; the sink turns it into
:class:`~ferromq.storage.StoreUnavailable` (the broker exits 3, as for an unreachable
Kafka), whatever the delivery mode: without the id no record can be framed. The HTTP
round trip is one blocking ``urllib`` call in a thread, at start only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

__all__ = ["Registry", "RegistryError", "subject_for"]

CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The registry could not be reached or did not give an id; the message says why."""


def subject_for(template: str, topic: str) -> str:
    """``registry_subject`` for ``topic`` (``{topic}`` replaced)."""
    return template.replace("{topic}", topic)


@dataclass(frozen=True)
class Registry:
    """A Confluent-compatible registry at ``url`` (``http(s)://host[:port][/path]``)."""

    url: str
    username: str = ""
    password: str = ""
    timeout: float = 10.0

    async def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` (Avro) registered under ``subject``."""
        return await asyncio.to_thread(self._register, subject, schema)

    def _register(self, subject: str, schema: str) -> int:
        where = f"{self.url.rstrip('/')}/subjects/{quote(subject, safe='')}/versions"
        body = json.dumps({"schema": schema, "schemaType": "AVRO"}).encode()
        request = urllib.request.Request(where, data=body, method="POST")
        request.add_header("Content-Type", CONTENT_TYPE)
        request.add_header("Accept", CONTENT_TYPE)
        if self.username:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = response.read()
        except urllib.error.HTTPError as exc:
            detail = " ".join(exc.read(500).decode(errors="replace").split())  # one line
            raise self._error(subject, f"HTTP {exc.code} {exc.reason}: {detail}") from None
        except urllib.error.URLError as exc:
            raise self._error(subject, f"unreachable: {exc.reason}") from None
        except (OSError, TimeoutError) as exc:
            raise self._error(subject, f"unreachable: {exc}") from None
        try:
            schema_id = json.loads(answer)["id"]
        except (ValueError, KeyError, TypeError):
            raise self._error(subject, f"no id in the answer: {answer[:200]!r}") from None
        if not isinstance(schema_id, int) or not 0 <= schema_id < 2**31:
            raise self._error(subject, f"schema id {schema_id!r} is not a 32-bit id")
        return schema_id

    def _error(self, subject: str, reason: str) -> RegistryError:
        return RegistryError(
            f"schema registry at {self.url}: registering record-v1 under {subject!r}: {reason}"
        )
