"""Typed results: what a turn asked for ``output_type`` must end with, and how it is checked.

An :class:`OutputSpec` is built once per typed turn from the host's type (anything pydantic
validates: a model, a dataclass, a TypedDict, ``list[...]``, a primitive, a union).  It gives the
model the shape to answer in — the JSON schema (field descriptions included) as a provider's
native structured output or grammar (:class:`~memora.llm.types.OutputFormat`), as the arguments
of a ``final_result`` tool when the turn also has tools, and always as an instruction — and it
checks what the model wrote before anything is returned: JSON, then pydantic's validation, then
the host's output validators.  A failure becomes a short message naming the fields, which goes
back to the model for another try (``output_retries``); past them the turn ends with
``OUTPUT_INVALID`` (:class:`~memora.errors.OutputValidationError`).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import from_json

from ..errors import InvalidInputError, describe_validation_error
from ..llm.schema_guard import SchemaCheckTimeout, bounded_validator, schema_errors
from ..llm.types import OutputFormat, ToolSpec

__all__ = [
    "FINAL_RESULT_TOOL",
    "OutputCheck",
    "OutputRetry",
    "OutputSpec",
    "OutputValidator",
]

FINAL_RESULT_TOOL = "final_result"
"""The tool a typed turn with tools ends by calling: its arguments are the result."""

_WRAP_KEY = "result"
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.S)


class OutputRetry(Exception):
    """Raised by a host's output validator: the value is valid but wrong; ``message`` goes
    back to the model, which tries again (counted against ``output_retries``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


OutputValidator = Callable[[Any], Any] | Callable[[Any], Awaitable[Any]]
"""A host's check of a validated result: returns the value to use (the same one, or a
corrected one), or raises :class:`OutputRetry`."""


class OutputCheck:
    """One check's outcome: the validated value, or what was wrong (for the model and the
    host)."""

    __slots__ = ("errors", "message", "ok", "value")

    def __init__(
        self,
        ok: bool,
        value: Any = None,
        message: str = "",
        errors: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.ok = ok
        self.value = value
        self.message = message
        self.errors = list(errors)


def _is_object_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" and "properties" in schema


def _strict_ready(schema: Any) -> bool:
    """Whether every object in ``schema`` requires all its properties (what a strict
    ``json_schema`` mode needs; optional fields would otherwise become required)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            props = schema.get("properties")
            if not isinstance(props, dict) or set(schema.get("required") or ()) != set(props):
                return False
            if schema.get("additionalProperties") not in (None, False):
                return False
        return all(_strict_ready(v) for v in schema.values())
    if isinstance(schema, list):
        return all(_strict_ready(v) for v in schema)
    return True


def _closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object (strict mode)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if out.get("type") == "object":
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


class _Compiled:
    """What a type's result needs, worked out once per type (a TypeAdapter and its JSON
    schema cost ~0.2 ms; a host asks for the same type turn after turn)."""

    __slots__ = ("adapter", "format", "name", "schema", "schema_text", "wrapped")

    def __init__(self, name: str, schema: dict[str, Any], adapter: Any = None) -> None:
        self.adapter = adapter
        self.name = name
        # a non-object result travels wrapped as {"result": ...}: providers' schema modes and
        # tool arguments are objects
        self.wrapped = not _is_object_schema(schema)
        if self.wrapped:
            schema = {
                "type": "object",
                "properties": {_WRAP_KEY: schema},
                "required": [_WRAP_KEY],
                **({"$defs": schema.pop("$defs")} if "$defs" in schema else {}),
            }
        self.schema = schema
        strict = _strict_ready(schema)
        self.format = OutputFormat(
            name=name, schema=_closed(schema) if strict else schema, strict=strict
        )
        self.schema_text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _compile(name: str, schema: dict[str, Any], adapter: Any = None) -> _Compiled:
    return _Compiled(name, schema, adapter)


@functools.lru_cache(maxsize=256)
def _compiled_cached(output_type: Any) -> _Compiled:
    adapter: TypeAdapter[Any] = TypeAdapter(output_type)
    return _Compiled(_name_of(output_type), adapter.json_schema(), adapter)


def _compiled_type(output_type: Any) -> _Compiled:
    try:
        return _compiled_cached(output_type)
    except TypeError:  # an unhashable type (an Annotated with unhashable metadata)
        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        return _Compiled(_name_of(output_type), adapter.json_schema(), adapter)


def _clean_name(name: str) -> str:
    """A name a provider accepts for a schema or a tool (``[A-Za-z0-9_-]``, at most 64)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"


def _name_of(output_type: Any) -> str:
    return _clean_name(str(getattr(output_type, "__name__", None) or "output"))


class OutputSpec:
    """The typed result a turn must end with (see the module docstring)."""

    def __init__(
        self,
        output_type: Any = None,
        *,
        retries: int = 2,
        validators: Sequence[OutputValidator] = (),
        json_schema: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError("output_retries must be 0 or more")
        self.output_type = output_type
        self.adapter: TypeAdapter[Any] | None = None
        self._validator: Any = None
        if json_schema is not None:
            # a schema is data from outside: checked against the limits and given a validator
            # that fetches nothing and matches patterns under a deadline (llm/schema_guard.py)
            self._validator = bounded_validator(json_schema)
            compiled = _compile(_clean_name(name) if name else "output", dict(json_schema))
        else:
            compiled = _compiled_type(output_type)
            self.adapter = compiled.adapter
        self.name = compiled.name
        self.wrapped = compiled.wrapped
        self.schema: dict[str, Any] = compiled.schema
        self.format = compiled.format
        self._schema_text = compiled.schema_text
        self.retries = retries
        self.validators = list(validators)

    def for_turn(
        self, validators: Sequence[OutputValidator] = (), retries: int | None = None
    ) -> OutputSpec:
        """This spec as one turn uses it: a copy with ``validators`` (an Agent's) after its own
        and ``retries`` when given.  The host's spec is never changed — one spec may serve many
        Agents and turns at once, and a turn's validators and retries are its own.  The copy
        shares what does not change (the compiled schema, the validator)."""
        turn = copy.copy(self)
        turn.validators = [*self.validators, *(v for v in validators if v not in self.validators)]
        if retries is not None:
            if retries < 0:
                raise ValueError("output_retries must be 0 or more")
            turn.retries = retries
        return turn

    @classmethod
    def from_json_schema(
        cls, schema: dict[str, Any], *, name: str | None = None, retries: int = 2
    ) -> OutputSpec:
        """A result described by a JSON schema instead of a Python type (``memora run
        --output-schema file.json``, a REST turn's ``output_schema``): validated with
        ``jsonschema`` (``pip install 'memora-kernel[schemas]'``); the value is the JSON
        data.  ``INVALID_INPUT``, naming the reason, for a schema that is not one or that
        passes a limit of :mod:`memora.llm.schema_guard` (a ``$ref`` outside the document,
        a ``$ref`` cycle, too large, too deep, a ``pattern`` or a length too long...)."""
        if not isinstance(schema, dict):
            raise InvalidInputError("output_schema must be a JSON object (a JSON schema)")
        return cls(json_schema=schema, name=name or str(schema.get("title") or ""), retries=retries)

    # -- what the model is given -------------------------------------------------------------

    def instruction(self, *, tool: bool) -> str:
        """What the system prompt says about the result's shape."""
        if tool:
            return (
                f"When you have the answer, call the `{FINAL_RESULT_TOOL}` tool with it as the "
                "arguments; that ends your turn. Do not answer in plain text."
            )
        return (
            "Answer with one JSON value and nothing else (no prose, no code fence), matching "
            f"this JSON schema:\n{self._schema_text}"
        )

    def tool(self) -> ToolSpec:
        """The ``final_result`` tool whose arguments are the result."""
        return ToolSpec(
            name=FINAL_RESULT_TOOL,
            description=f"Give the final answer as a {self.name}; this ends your turn.",
            parameters=self.schema,
        )

    # -- checking what the model wrote --------------------------------------------------------

    @staticmethod
    def json_text(text: str) -> str:
        """The JSON in a model's answer: without a Markdown code fence around it."""
        stripped = text.strip()
        fenced = _FENCE.match(stripped)
        return fenced.group(1).strip() if fenced else stripped

    def _unwrap(self, data: Any) -> Any:
        if self.wrapped and isinstance(data, dict) and _WRAP_KEY in data:
            return data[_WRAP_KEY]
        return data

    def check(self, text: str) -> OutputCheck:
        """Parse and validate the model's text (the answer, or ``final_result``'s
        arguments)."""
        raw = self.json_text(text)
        try:
            data = json.loads(raw) if raw else None
        except json.JSONDecodeError as exc:
            return OutputCheck(
                False,
                message=f"the answer is not valid JSON ({exc.msg} at position {exc.pos})",
                errors=[{"type": "json_invalid", "loc": [], "msg": exc.msg}],
            )
        except ValueError as exc:  # JSON, but a number of over 4,300 digits (Python's limit)
            said = str(exc).split(";")[0]
            return OutputCheck(
                False,
                message=f"the answer holds a number memora cannot read ({said})",
                errors=[{"type": "json_invalid", "loc": [], "msg": said}],
            )
        except RecursionError:  # a model's answer of a thousand nested brackets
            return OutputCheck(
                False,
                message="the answer nests too deep",
                errors=[{"type": "json_invalid", "loc": [], "msg": "nested too deep"}],
            )
        if raw == "":
            return OutputCheck(
                False,
                message="the answer is empty",
                errors=[{"type": "missing", "loc": [], "msg": "empty"}],
            )
        if self._validator is not None:
            try:
                problems = schema_errors(self._validator, self._unwrap(data))
            except SchemaCheckTimeout as exc:
                problems = [("", str(exc))]
            if problems:
                return OutputCheck(
                    False,
                    message="; ".join(f"{loc or '(root)'}: {msg}" for loc, msg in problems[:5]),
                    errors=[
                        {"type": "schema", "loc": loc.split("."), "msg": m} for loc, m in problems
                    ],
                )
            return OutputCheck(True, value=self._unwrap(data))
        assert self.adapter is not None
        try:
            value = self.adapter.validate_python(self._unwrap(data))
        except ValidationError as exc:
            return OutputCheck(
                False,
                message=describe_validation_error(exc, self.name, limit=5),
                errors=[
                    {"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]}
                    for e in exc.errors(include_url=False, include_input=False)
                ],
            )
        return OutputCheck(True, value=value)

    async def validate(self, text: str) -> OutputCheck:
        """:meth:`check`, then the host's validators in order (sync or async).  A result
        described by a JSON schema is checked on a worker thread: its ``pattern``s may take up
        to ``CHECK_SECONDS`` on a hostile answer, and the event loop keeps answering."""
        if self._validator is not None:
            result = await asyncio.to_thread(self.check, text)
        else:
            result = self.check(text)
        if not result.ok:
            return result
        value = result.value
        for validator in self.validators:
            try:
                value = validator(value)
                if inspect.isawaitable(value):
                    value = await value
            except OutputRetry as exc:
                return OutputCheck(
                    False,
                    message=exc.message,
                    errors=[{"type": "output_retry", "loc": [], "msg": exc.message}],
                )
        return OutputCheck(True, value=value)

    def retry_message(self, problem: str) -> str:
        """What the model is told after a result that did not pass."""
        return (
            f"Your answer did not match the required {self.name}: {problem}. "
            "Answer again with the corrected result only."
        )

    def dump(self, value: Any) -> Any:
        """The validated value as JSON data (what ``done.output`` and the session log keep)."""
        if self.adapter is None:
            return value
        return self.adapter.dump_python(value, mode="json")

    def partial(self, text: str) -> Any:
        """The result as far as the unfinished JSON ``text`` goes, as JSON data, for a UI to
        fill in while the model writes; ``None`` while nothing can be made of it yet.  The
        prefix is read by pydantic's partial JSON parser; what pydantic's partial validation
        accepts comes validated, a prefix that only lacks fields still to come is passed on as
        read so far, and one with a wrong value gives ``None``."""
        raw = self.json_text(text) if text.lstrip().startswith("```") else text.strip()
        if not raw:
            return None
        try:
            data = self._unwrap(from_json(raw, allow_partial="trailing-strings"))
        except ValueError:
            return None
        if self.adapter is None:
            return data
        try:
            value = self.adapter.validate_python(data, experimental_allow_partial=True)
        except ValidationError as exc:
            if any(e["type"] != "missing" for e in exc.errors(include_url=False)):
                return None
            return data
        return self.adapter.dump_python(value, mode="json")
