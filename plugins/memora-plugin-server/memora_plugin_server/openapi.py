"""The OpenAPI 3.1 document, built from the route table (:data:`~.routes.API`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .routes import Api

__all__ = ["openapi_document"]


def openapi_document(table: Sequence[Api]) -> dict[str, Any]:
    """OpenAPI 3.1 for the route ``table``: the document and the served routes come from the
    same table, so they cannot drift apart."""

    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {
        "Error": {
            "type": "object",
            "properties": {
                "error": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    "required": ["code", "message"],
                }
            },
        }
    }
    for api in table:
        op: dict[str, Any] = {
            "summary": api.summary,
            "operationId": api.handler.__name__,
            "responses": {
                "200": (
                    {
                        "description": "server-sent events; each `data:` is one chunk's JSON",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    }
                    if api.stream
                    else {"description": "JSON", "content": {"application/json": {}}}
                ),
                "default": {
                    "description": "a refusal",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                },
            },
        }
        params = [p.strip("{}") for p in api.path.split("/") if p.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        if api.access != "public":
            op["security"] = [{"bearer": []}]
        if api.body is not None:
            schemas[api.body.__name__] = api.body.model_json_schema()
            op["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{api.body.__name__}"}
                    }
                },
            }
        paths.setdefault(api.path, {})[api.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "memora", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
