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

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..errors import describe_validation_error
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


def _name_of(output_type: Any) -> str:
    name = getattr(output_type, "__name__", None) or "output"
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(name))[:64] or "output"


class OutputSpec:
    """The typed result a turn must end with (see the module docstring)."""

    def __init__(
        self,
        output_type: Any,
        *,
        retries: int = 2,
        validators: Sequence[OutputValidator] = (),
    ) -> None:
        if retries < 0:
            raise ValueError("output_retries must be 0 or more")
        self.output_type = output_type
        self.adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        self.name = _name_of(output_type)
        schema = self.adapter.json_schema()
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
        self.schema: dict[str, Any] = schema
        strict = _strict_ready(schema)
        self.format = OutputFormat(
            name=self.name, schema=_closed(schema) if strict else schema, strict=strict
        )
        self.retries = retries
        self.validators = list(validators)
        self._schema_text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
        self.partial_state: list[Any] = [0, None]
        """The streaming answer's size at the last partial parse, and what it gave."""

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
        if raw == "":
            return OutputCheck(
                False,
                message="the answer is empty",
                errors=[{"type": "missing", "loc": [], "msg": "empty"}],
            )
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
        """:meth:`check`, then the host's validators in order (sync or async)."""
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
        return self.adapter.dump_python(value, mode="json")

    def partial(self, text: str) -> Any:
        """The result as far as the unfinished JSON ``text`` goes, as JSON data, for a UI to
        fill in while the model writes; ``None`` while nothing can be made of it yet.  What
        pydantic's partial validation accepts comes validated; a prefix that only lacks
        required fields still to come is passed on as parsed so far; a prefix with a wrong
        value gives ``None``."""
        raw = self.json_text(text) if text.lstrip().startswith("```") else text.strip()
        if not raw:
            return None
        if not self.wrapped:
            try:
                value = self.adapter.validate_json(
                    raw, experimental_allow_partial="trailing-strings"
                )
                return self.adapter.dump_python(value, mode="json")
            except ValidationError as exc:
                if any(e["type"] != "missing" for e in exc.errors(include_url=False)):
                    return None
            except ValueError:
                return None
        try:
            data = self._unwrap(json.loads(_close_json(raw)))
        except ValueError:
            return None
        return data


def _close_json(text: str) -> str:
    """``text`` (a JSON prefix) with its open strings, arrays and objects closed: enough to
    read a wrapped result's prefix."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    tail = text.rstrip()
    if in_string:
        tail += '"'
    elif tail.endswith((",", ":")):
        tail = tail[:-1]
    return tail + "".join(reversed(stack))
