"""The tool model: a name, a description, a JSON schema for arguments, and an async handler.

Build tools from typed async functions with :func:`tool`::

    from typing import Annotated
    from pydantic import Field
    from memora.tools import tool, ToolContext

    @tool(idempotency="read-only")
    async def word_count(ctx: ToolContext, path: Annotated[str, Field(description="File to count")]) -> str:
        "Count the words of a project file."
        ...

The first parameter, when annotated ``ToolContext``, receives the call's context; the others
become the argument schema (pydantic validates them; a bad call returns ``INVALID_ARGS`` with
what was wrong).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..errors import ErrorCode, MemoraError, ToolError, ToolErrorCode, describe_validation_error
from ..llm.types import ToolSpec

__all__ = [
    "ControlSignal",
    "Idempotency",
    "Tool",
    "ToolOutput",
    "ToolRegistry",
    "ToolRun",
    "format_validation_error",
    "run_parsed",
    "run_tool",
    "tool",
]

logger = logging.getLogger("memora.tools")


class ControlSignal(Exception):
    """Raised by a tool to steer the loop (e.g. pause for the user); never reported as a failure."""


Idempotency = Literal["idempotent", "idempotent-key", "non-idempotent", "read-only"]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returns: ``content`` for the model, ``summary`` for the host's UI."""

    content: str
    summary: str = ""
    data: Mapping[str, Any] | None = None


Handler = Callable[..., Awaitable["ToolOutput | str"]]


def format_validation_error(name: str, exc: ValidationError) -> str:
    return f"invalid arguments for {name}: " + describe_validation_error(exc, "(arguments)")


@dataclass
class Tool:
    """A tool the model can call: its name, description, argument model and handler, and what it
    may do (writes, runs code, idempotency)."""

    name: str
    description: str
    args_model: type[BaseModel] | Callable[[], type[BaseModel]]
    """The pydantic model of the arguments, or a zero-argument callable building it on first
    use (the ``tool`` decorator defers it: building ~25 models costs start-up time)."""
    handler: Handler
    idempotency: Idempotency = "non-idempotent"
    writes: bool = False
    runs_code: bool = False
    takes_context: bool = True
    capability: str | None = None
    """A capability the active role pack must declare for the model to see this tool (the
    privileged ones, ``web:search`` ..., also need a plugin providing their service; see
    :data:`memora.capabilities.PRIVILEGED`)."""
    pauses: bool = False
    """The tool pauses the turn for the user (``ask_user``): it never runs in a parallel batch,
    counts against ``global.askLimit`` and is visible only when ``reflect.userFollowup = ask``."""
    plans: bool = False
    """The tool keeps the plan (``task_table_update``): with ``act.multiStepReasoning = manual``
    it is visible only when the user asked for a plan (or one exists)."""
    _schema: dict[str, Any] | None = field(default=None, repr=False)
    _model: type[BaseModel] | None = field(default=None, repr=False)
    _spec: ToolSpec | None = field(default=None, repr=False)

    def model(self) -> type[BaseModel]:
        """The arguments' pydantic model (built on first use when deferred)."""
        built = self._model
        if built is None:
            given = self.args_model
            built = given if isinstance(given, type) else given()
            self._model = built
        return built

    @property
    def parameters(self) -> dict[str, Any]:
        if self._schema is None:
            schema = self.model().model_json_schema()
            schema.pop("title", None)
            for prop in schema.get("properties", {}).values():
                if isinstance(prop, dict):
                    prop.pop("title", None)
            self._schema = schema
        return self._schema

    def spec(self) -> ToolSpec:
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, self.parameters)
        return self._spec

    def parse_args(self, raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Parse and validate arguments (JSON text or a mapping); ``INVALID_ARGS`` otherwise."""
        return self._validate(raw)[0]

    def validated(
        self, raw: str | Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], BaseModel | None]:
        """:meth:`parse_args`, with the validated model when this tool validates with its own
        (not a subclass's ``parse_args``): :meth:`invoke_validated` then runs the handler
        without validating the arguments a second time."""
        if type(self).parse_args is not Tool.parse_args:
            return self.parse_args(raw), None
        return self._validate(raw)

    def _validate(self, raw: str | Mapping[str, Any] | None) -> tuple[dict[str, Any], BaseModel]:
        if raw is None or raw == "":
            data: Any = {}
        elif isinstance(raw, str):
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise ToolError(
                    ToolErrorCode.INVALID_ARGS,
                    f"arguments for {self.name} are not valid JSON: {exc}",
                ) from exc
        else:
            data = dict(raw)
        if not isinstance(data, dict):
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"arguments for {self.name} must be a JSON object"
            )
        try:
            model = self.model().model_validate(data)
        except ValidationError as exc:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, format_validation_error(self.name, exc)
            ) from exc
        # plain JSON data: what hosts see, what checks may rewrite, what pauses persist
        return model.model_dump(mode="json"), model

    async def invoke(self, ctx: Any, args: Mapping[str, Any]) -> ToolOutput:
        """Run the handler with validated ``args`` (JSON data, turned back into typed values)."""
        try:
            model = self.model().model_validate(dict(args))
        except ValidationError as exc:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, format_validation_error(self.name, exc)
            ) from exc
        return await self._call(ctx, model)

    async def invoke_validated(
        self, ctx: Any, args: Mapping[str, Any], model: BaseModel | None
    ) -> ToolOutput:
        """:meth:`invoke` for ``args`` that :meth:`validated` returned with ``model``: the
        handler runs on the model as it is.  A subclass's own ``invoke`` is always used."""
        if model is None or type(self).invoke is not Tool.invoke:
            return await self.invoke(ctx, args)
        return await self._call(ctx, model)

    async def _call(self, ctx: Any, model: BaseModel) -> ToolOutput:
        values = {k: getattr(model, k) for k in type(model).model_fields}
        result = await (
            self.handler(ctx, **values) if self.takes_context else self.handler(**values)
        )
        if isinstance(result, ToolOutput):
            return result
        text = str(result)
        return ToolOutput(text, _summary(text))


def _summary(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


@overload
def tool(fn: Handler) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotency: Idempotency = "non-idempotent",
    writes: bool = False,
    runs_code: bool = False,
    capability: str | None = None,
    pauses: bool = False,
    plans: bool = False,
) -> Callable[[Handler], Tool]: ...


def tool(
    fn: Handler | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotency: Idempotency = "non-idempotent",
    writes: bool = False,
    runs_code: bool = False,
    capability: str | None = None,
    pauses: bool = False,
    plans: bool = False,
) -> Tool | Callable[[Handler], Tool]:
    """Make a :class:`Tool` from a typed async function (usable bare or with options)."""
    options: dict[str, Any] = dict(
        name=name,
        description=description,
        idempotency=idempotency,
        writes=writes,
        runs_code=runs_code,
        capability=capability,
        pauses=pauses,
        plans=plans,
    )

    def build(func: Handler) -> Tool:
        return _build_tool(func, deferred=False, options=options)

    if fn is not None:
        return build(fn)
    return build


def builtin_tool(**options: Any) -> Callable[[Handler], Tool]:
    """:func:`tool` for the kernel's own tools: their annotations are evaluated when the
    argument model is first built (``get_type_hints`` costs ~0.5 ms a tool, ~10 ms of every
    start-up); a host's tool has them checked when it is decorated."""

    def build(func: Handler) -> Tool:
        return _build_tool(func, deferred=True, options=options)

    return build


def _build_tool(func: Handler, *, deferred: bool, options: Mapping[str, Any]) -> Tool:
    """The tool of ``func`` with ``options`` (the keyword arguments of :func:`tool`)."""
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"tool {func.__name__} must be an async function")
    params = list(inspect.signature(func).parameters.values())
    hints: dict[str, Any] | None = None
    takes_context = bool(params) and params[0].name == "ctx"
    if not deferred or (params and not takes_context):
        hints = get_type_hints(func, include_extras=True)
        takes_context = bool(params) and (
            takes_context or getattr(hints.get(params[0].name), "__name__", "") == "ToolContext"
        )
    args = params[1:] if takes_context else params
    for p in args:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {func.__name__}: *args/**kwargs are not supported")

    def model() -> type[BaseModel]:
        try:
            types = hints if hints is not None else get_type_hints(func, include_extras=True)
            fields: dict[str, Any] = {
                p.name: (
                    types.get(p.name, Any),
                    ... if p.default is inspect.Parameter.empty else p.default,
                )
                for p in args
            }
            return create_model(
                f"{func.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields
            )
        except Exception as exc:
            raise TypeError(
                f"tool {func.__name__}: its parameters cannot be validated: {exc}"
            ) from exc

    doc = options.get("description") or inspect.cleandoc(func.__doc__ or "").strip()
    if not doc:
        raise TypeError(f"tool {func.__name__} needs a description (a docstring)")
    flags = {k: v for k, v in options.items() if k not in ("name", "description")}
    return Tool(
        name=options.get("name") or func.__name__,
        description=doc,
        args_model=model,
        handler=func,
        takes_context=takes_context,
        **flags,
    )


@dataclass(frozen=True, slots=True)
class ToolRun:
    """The outcome of one tool call, as the loop reports it."""

    ok: bool
    content: str
    summary: str
    error_code: str | None = None
    data: Mapping[str, Any] | None = None


async def run_tool(t: Tool, ctx: Any, raw_args: str | Mapping[str, Any] | None) -> ToolRun:
    """Validate arguments and run ``t``; every failure becomes a :class:`ToolRun` with a code.

    Control signals (``ask_user``'s pause) and cancellation propagate.
    """
    try:
        args, model = t.validated(raw_args)
    except ToolError as exc:
        return ToolRun(
            False,
            f"{exc.code}: {exc.message}",
            f"{exc.code}: {_summary(exc.message)}",
            str(exc.code),
        )
    return await run_parsed(t, ctx, args, model=model)


async def run_parsed(
    t: Tool, ctx: Any, args: dict[str, Any], *, model: BaseModel | None = None
) -> ToolRun:
    """Run ``t`` with arguments already validated by :meth:`Tool.parse_args` (the loop validates
    once, in its gates; ``model``: what :meth:`Tool.validated` returned with ``args``, see
    :meth:`Tool.invoke_validated`); failures become a :class:`ToolRun` as in :func:`run_tool`."""
    try:
        out = await t.invoke_validated(ctx, args, model)
    except ToolError as exc:
        return ToolRun(
            False,
            f"{exc.code}: {exc.message}",
            f"{exc.code}: {_summary(exc.message)}",
            str(exc.code),
        )
    except MemoraError as exc:
        return ToolRun(
            False,
            f"{exc.code}: {exc.message}",
            _summary(exc.message),
            ToolErrorCode.EXECUTION_FAILED.value,
        )
    except ControlSignal:
        raise
    except Exception as exc:  # a bug in a tool must not end the turn
        logger.warning("tool %s raised %r", t.name, exc, exc_info=True)
        msg = f"{type(exc).__name__}: {exc}"
        return ToolRun(
            False, f"EXECUTION_FAILED: {msg}", _summary(msg), ToolErrorCode.EXECUTION_FAILED.value
        )
    return ToolRun(True, out.content, out.summary or _summary(out.content), None, out.data)


class ToolRegistry:
    """``agent.tools``: the tools an Agent knows, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._owners: dict[str, str] = {}
        self.version = 0
        """Changes whenever a tool is registered or removed (caches of schemas key on it)."""
        self.executor: Callable[..., Awaitable[Any]] | None = None
        """Set by the Agent: runs a call through its gates (``Agent.call_tool``)."""

    async def execute(
        self, name: str, args: Mapping[str, Any] | str | None = None, *, approve: bool = False
    ) -> Any:
        """Run one call through the Agent's gates, outside the conversation (the seed's
        ``agent.tools.execute``); returns a :class:`memora.agent.ToolCallResult`."""
        if self.executor is None:
            raise MemoraError(
                ErrorCode.NOT_INITIALIZED,
                "tools.execute() runs through an Agent's gates: use agent.tools after init()",
            )
        return await self.executor(name, args, approve=approve)

    def register(self, t: Tool, *, owner: str = "host", replace: bool = False) -> Tool:
        if not isinstance(t, Tool):
            raise MemoraError(
                ErrorCode.INVALID_INPUT,
                f"{t!r} is not a memora Tool; build one with memora.tools.tool",
            )
        if t.name in self._tools and not replace:
            raise MemoraError(
                ErrorCode.PLUGIN_CONFLICT,
                f"tool name {t.name!r} is registered by both {self._owners[t.name]!r} and {owner!r}",
                context={"owners": [self._owners[t.name], owner]},
            )
        self._tools[t.name] = t
        self._owners[t.name] = owner
        self.version += 1
        return t

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self.version += 1
        self._owners.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def owner(self, name: str) -> str | None:
        """Who registered ``name``: a plugin name, or ``host`` for direct registrations."""
        return self._owners.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
