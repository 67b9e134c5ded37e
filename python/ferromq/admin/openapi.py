"""The admin API's route table type and the OpenAPI 3.1 document made from it.

Each :class:`Route` names its method, path (OpenAPI's form, ``/clients/{client_id}``),
parameters, request body schema, success status and answer schema, and the error
statuses it may answer; :mod:`ferromq.admin.api` mounts the routes on aiohttp from the
same table and :func:`openapi_document` prints it, so the document cannot drift from
the routes. Every error answer is ``{"error": "..."}`` (:data:`ERROR`); every route
needs the admin listener's bearer token (``bearerAuth``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

from aiohttp import web

from ferromq.admin.schema import STRING, Schema, obj

__all__ = ["ERROR", "Handler", "Param", "Route", "openapi_document"]

ERROR: Schema = obj({"error": STRING}, required=("error",))

Handler = Callable[[Any, web.Request], Awaitable[object]]
"""``(api, request)`` → the JSON answer, or None for 204 No Content."""


@dataclass(frozen=True)
class Param:
    name: str
    location: Literal["path", "query"]
    schema: Schema
    description: str
    required: bool = False
    pattern: str | None = None
    """A path parameter's aiohttp pattern, for one that may hold ``/`` and newlines (last
    in the path)."""


@dataclass(frozen=True)
class Route:
    method: Literal["GET", "POST", "DELETE"]
    path: str
    summary: str
    handler: Handler
    params: tuple[Param, ...] = ()
    body: Schema | None = None
    status: int = 200
    answer: Schema | None = None
    errors: tuple[int, ...] = ()

    @property
    def aiohttp_path(self) -> str:
        path = self.path
        for param in self.params:
            if param.location == "path" and param.pattern is not None:
                path = path.replace(f"{{{param.name}}}", f"{{{param.name}:{param.pattern}}}")
        return path

    @property
    def operation_id(self) -> str:
        return self.handler.__name__


def _operation(route: Route) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary}
    if route.params:
        operation["parameters"] = [
            {
                "name": p.name,
                "in": p.location,
                "required": p.required or p.location == "path",
                "description": p.description,
                "schema": p.schema,
            }
            for p in route.params
        ]
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": route.body}},
        }
    answer: dict[str, Any] = {"description": HTTPStatus(route.status).phrase}
    if route.answer is not None:
        answer["content"] = {"application/json": {"schema": route.answer}}
    responses: dict[str, Any] = {str(route.status): answer}
    # Every route may meet a bad token; a body or a query may be refused.
    errors = {401, *route.errors}
    if route.body is not None or any(p.location == "query" for p in route.params):
        errors.add(400)
    for status in sorted(errors):
        responses[str(status)] = {
            "description": HTTPStatus(status).phrase,
            "content": {"application/json": {"schema": ERROR}},
        }
    operation["responses"] = responses
    return operation


def openapi_document(routes: Sequence[Route], prefix: str, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``, served under ``prefix`` (``/api/v1``)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ferromq admin API",
            "version": version,
            "description": "Clients, sessions, subscriptions, retained messages, "
            "publishing, users, ACL, bans, listeners and statistics of a running "
            "ferromq broker, and the nodes of its cluster. Lists are paginated: pass "
            "`next` back as `cursor`.",
        },
        "servers": [{"url": prefix}],
        "security": [{"bearerAuth": []}],
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }
