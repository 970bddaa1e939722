"""A2A: each served project as an Agent2Agent agent, built with ``a2a-sdk`` (protocol 1.0).

- the agent card at ``/.well-known/agent-card.json`` (the first project) and at
  ``/a2a/{project}/.well-known/agent-card.json``, naming this server's own URL as the request
  reached it;
- JSON-RPC at ``/a2a/{project}``: ``SendMessage`` (``message/send``) and ``SendStreamingMessage``
  (``message/stream``), ``GetTask``, ``ListTasks``, ``CancelTask``, ``SubscribeToTask``.

A task belongs to the user (memory scope) whose message made it: every method that reads or
acts on a task — and a message continuing one — finds only its caller's own tasks (the SDK's task
store is keyed by the caller's scope, see :class:`Caller`); another user's task is not found, as
an unknown one.

An A2A context is a memora session (``a2a-<contextId>``); a message starts a turn, whose text
streams as one ``answer`` artifact and whose tool results arrive as ``working`` status messages.
A tool call that needs approval, or a question, puts the task in ``input-required``: the next
message on the same task answers it — ``approve`` / ``yes`` or ``deny`` / ``no`` (anything else
is the reason of a denial), or a data part ``{"decision": ..., "args": {...}}``; for questions,
the text answers a single question and a data part ``{"slot": "answer"}`` several.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.auth.user import User
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder, ServerCallContextBuilder
from a2a.server.tasks import TaskUpdater
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from memora import OutputSpec
from memora.chunks import (
    AbortedChunk,
    ApprovalPendingChunk,
    DoneChunk,
    ErrorChunk,
    NarrateChunk,
    PausedChunk,
    QuestionPendingChunk,
    TextChunk,
    ToolResultChunk,
)
from memora.errors import InvalidInputError, MemoraError

from ._version import __version__
from .bodies import MAX_TURN_CHARS
from .errors import ApiError
from .guard import USER_HEADER, scope_for
from .hub import Hub

__all__ = [
    "Caller",
    "MemoraExecutor",
    "a2a_routes",
    "agent_card",
    "caller_of",
    "owner_of",
    "request_caller",
    "session_for",
]

_YES = {"approve", "approved", "yes", "y", "ok", "allow"}
_NO = {"deny", "denied", "no", "n", "reject"}


def session_for(context_id: str) -> str:
    """The memora session of an A2A context (ids limited to what a session id may hold)."""
    return "a2a-" + re.sub(r"[^A-Za-z0-9._-]", "_", context_id)[:120]


def agent_card(hub: Hub, project: str, base_url: str, *, secured: bool) -> AgentCard:
    packs = hub.role_packs(project).list_meta()
    card = AgentCard(
        name=f"memora: {project}",
        description=f"memora agent for the project {project!r}: tools, sessions and memory.",
        version=__version__,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=p.name,
                name=p.display_name or p.name,
                description=p.description or f"role pack {p.name}",
                tags=list(p.capabilities) or ["chat"],
            )
            for p in packs
            if p.active
        ]
        or [AgentSkill(id="chat", name="chat", description="Talk to memora.", tags=["chat"])],
        supported_interfaces=[
            AgentInterface(
                protocol_binding="JSONRPC",
                protocol_version="1.0",
                url=f"{base_url.rstrip('/')}/a2a/{project}",
            )
        ],
    )
    if secured:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={"bearer": StringList(list=[])})
        )
    return card


def _typed(message: Any) -> OutputSpec | None:
    """A message asking for a typed result: ``metadata.output_schema``, a JSON schema."""
    if not message.HasField("metadata"):
        return None
    schema = MessageToDict(message.metadata).get("output_schema")
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise InvalidInputError("metadata.output_schema must be a JSON schema (an object)")
    return OutputSpec.from_json_schema(schema)


class Caller(User):
    """Who sends an A2A request, as the SDK's call context carries it to the task store and the
    executor: the request's token, its ``X-Memora-User`` header, and the scope (user) it acts in.

    Its ``user_name`` is the key the SDK's task store files tasks under (see :func:`owner_of`):
    ``GetTask``, ``ListTasks``, ``CancelTask``, ``SubscribeToTask`` and a message continuing a
    task find only the tasks of the same scope — another user's task is "not found", as an
    unknown one.  ``refused``: the scope could not be settled (a token naming a user it may not
    act for, a malformed name); the message's task then fails with that reason, and the key
    matches no other request's."""

    def __init__(
        self,
        token: Any,
        header: str | None,
        scope: str | None,
        *,
        refused: str | None = None,
    ) -> None:
        self.token = token
        self.header = header
        self.scope = scope
        self.refused = refused
        self._key = (
            "refused:" + secrets.token_hex(16)
            if refused is not None
            else ("project" if scope is None else "user:" + scope)
        )

    @property
    def is_authenticated(self) -> bool:
        return self.refused is None

    @property
    def user_name(self) -> str:
        return self._key


_NOBODY_KEY = "nobody"
"""The owner key of a call context that carries no :class:`Caller` — one the guarded endpoint
did not build.  It is never given to a task a caller made, so such a context finds nothing."""


def owner_of(context: ServerCallContext) -> str:
    """The task store's owner key of a call: its :class:`Caller`'s scope (fail closed: a
    context without one owns nothing anyone made)."""
    user = context.user
    return user.user_name if isinstance(user, Caller) else _NOBODY_KEY


def caller_of(context: ServerCallContext | None) -> Caller:
    """The :class:`Caller` of a request, or ``INVALID_INPUT``: a context the guarded endpoint
    did not build must never read as this machine's owner, who may act for any user."""
    user = context.user if context is not None else None
    if not isinstance(user, Caller):
        raise InvalidInputError("the caller of this A2A request is unknown here; nothing was run")
    return user


def _refused_schema(body: Any) -> Response | None:
    """A message whose ``metadata.output_schema`` is no schema memora takes (see
    :mod:`memora.llm.schema_guard`): refused before a task is made, as the JSON-RPC error for
    invalid params naming the reason — JSON-RPC's 400, sent with HTTP 200 as the A2A SDK sends
    every JSON-RPC error (its client raises it with the message)."""
    metadata = _metadata(body)
    schema = metadata.get("output_schema") if isinstance(metadata, dict) else None
    if schema is None:
        return None
    try:
        if not isinstance(schema, dict):
            raise InvalidInputError("must be a JSON schema (an object)")
        OutputSpec.from_json_schema(schema)
    except MemoraError as exc:
        said = exc.message.removeprefix("output_schema").lstrip(": ")
        error = {"code": -32602, "message": f"Invalid params: metadata.output_schema: {said}"}
        ident = body.get("id") if isinstance(body, dict) else None
        return JSONResponse({"jsonrpc": "2.0", "id": ident, "error": error})
    return None


def _metadata(body: Any) -> object:
    """``params.message.metadata`` of a JSON-RPC body (protocol 1.0 and 0.3 alike)."""
    params = body.get("params") if isinstance(body, dict) else None
    message = params.get("message") if isinstance(params, dict) else None
    return message.get("metadata") if isinstance(message, dict) else None


def _message_user(body: Any) -> object:
    """``params.message.metadata.user`` of a JSON-RPC body."""
    metadata = _metadata(body)
    return metadata.get("user") if isinstance(metadata, dict) else None


def request_caller(token: Any, header: str | None, body: Any) -> Caller:
    """The :class:`Caller` of a request: the user its message names (``metadata.user``) or its
    ``X-Memora-User`` header, when the token may act for users; else the token's own scope."""
    user = _message_user(body)
    try:
        if user is not None and header is not None and user != header:
            raise InvalidInputError("the X-Memora-User header and metadata.user differ")
        scope = scope_for(token, user if user is not None else header)
    except (MemoraError, ApiError) as exc:
        code = exc.code.value if isinstance(exc, MemoraError) else exc.code
        return Caller(token, header, None, refused=f"{code}: {exc.message}")
    return Caller(token, header, scope)


class _CallerContexts(ServerCallContextBuilder):
    """The SDK's call context with the request's :class:`Caller` (set by the guarded endpoint)
    as its user."""

    def build(self, request: Request) -> ServerCallContext:
        context = DefaultServerCallContextBuilder().build(request)
        caller = getattr(request.state, "memora_caller", None)
        if isinstance(caller, Caller):
            context.user = caller
        return context


class MemoraExecutor(AgentExecutor):
    """Runs A2A messages as turns of a project's sessions in the :class:`Hub`."""

    def __init__(self, hub: Hub, project: str) -> None:
        self.hub = hub
        self.project = project

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        if message is None:
            return
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        session = session_for(task.context_id)
        text = context.get_user_input().strip()
        data = [d for d in get_data_parts(list(message.parts)) if isinstance(d, dict)]
        try:
            caller = caller_of(context.call_context)
            if caller.refused is not None:
                raise InvalidInputError(caller.refused)
            scope = caller.scope
            if len(text) > MAX_TURN_CHARS:  # the same limit as a REST or AG-UI turn
                raise InvalidInputError(f"the message is over {MAX_TURN_CHARS} characters")
            if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                log = await self._answer(session, text, data[0] if data else None, scope)
            else:
                log = await self.hub.start_turn(
                    self.project, session, text, output=_typed(message), create=True, scope=scope
                )
        except (MemoraError, ApiError) as exc:
            code = exc.code.value if isinstance(exc, MemoraError) else exc.code
            said = exc.message if exc.message.startswith(f"{code}: ") else f"{code}: {exc.message}"
            await updater.failed(updater.new_agent_message([Part(text=said)]))
            return
        await updater.start_work()
        # one artifact, the answer: text streamed before a pause (narration) is replaced by the
        # final answer when the turn ends
        await self._follow(updater, log, f"answer-{task.id}", earlier=bool(task.artifacts))

    async def _answer(
        self, session: str, text: str, data: dict[str, Any] | None, scope: str | None
    ) -> Any:
        agent = await self.hub.agent(self.project, session, scope=scope)
        paused = agent.paused_turn
        if paused is None:
            return await self.hub.start_turn(self.project, session, text, create=True, scope=scope)
        if paused.kind == "question":
            questions = getattr(paused.paused, "questions", [])
            answers = (
                {str(k): str(v) for k, v in data.items()}
                if data is not None
                else {q.slot: text for q in questions[:1]}
            )
            return await self.hub.continue_turn(self.project, session, answers=answers, scope=scope)
        call_id = str(getattr(paused.paused, "tool_call_id", ""))
        decision = str((data or {}).get("decision") or text).strip().lower()
        if decision in _YES:
            args = (data or {}).get("args")
            return await self.hub.continue_turn(
                self.project,
                session,
                approve=(call_id, args if isinstance(args, dict) else None),
                scope=scope,
            )
        reason = str((data or {}).get("reason") or ("" if decision in _NO else text))
        return await self.hub.continue_turn(
            self.project, session, deny=(call_id, reason), scope=scope
        )

    async def _follow(
        self, updater: TaskUpdater, log: Any, artifact: str, *, earlier: bool = False
    ) -> None:
        """The turn's events as task updates.  Its text streams into the task's one artifact;
        the last piece is held back so it can carry ``last_chunk`` when the turn ends or
        pauses.  Text that turned out to be narration (before a tool call, or before a pause:
        ``earlier`` says the artifact has text from a stretch before this one) is replaced by
        the final answer when the turn ends, so the artifact holds the answer only."""
        streamed = False
        narrated = earlier
        held: str | None = None
        typed = log.output is not None  # its text is the result being written: not streamed
        pending: list[str] = []

        async def emit(text_: str, *, last: bool) -> None:
            nonlocal streamed
            await updater.add_artifact(
                [Part(text=text_)],
                artifact_id=artifact,
                name="answer",
                append=streamed,
                last_chunk=last,
            )
            streamed = True

        async for chunk in log.chunks(0):
            match chunk:
                case DoneChunk(output=output) if output is not None:
                    # a typed turn answers with its validated result as one DataPart
                    await updater.add_artifact(
                        [new_data_part(output, "application/json")],
                        artifact_id=artifact,
                        name="answer",
                        last_chunk=True,
                    )
                    await _complete(updater, chunk)
                case TextChunk(content=content) if content and not typed:
                    if held is not None:
                        await emit(held, last=False)
                    held = content
                case NarrateChunk(withdrawn=withdrawn) if withdrawn:
                    narrated = True
                case ToolResultChunk(name=name, ok=ok, blocked=blocked, summary=summary):
                    status = "refused" if blocked else "done" if ok else "failed"
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING,
                        message=updater.new_agent_message(
                            [Part(text=f"{name} {status}: {summary}".strip())]
                        ),
                    )
                case ApprovalPendingChunk(name=name, args=args, reason=reason):
                    shown = json.dumps(args, ensure_ascii=False)
                    pending.append(
                        f"memora wants to run {name} {shown} ({reason}). "
                        'Reply approve or deny (or a data part {"decision", "args"}).'
                    )
                case QuestionPendingChunk(questions=questions):
                    pending.extend(q.question for q in questions)
                case PausedChunk():
                    if held is not None:
                        await emit(held, last=True)
                        held = None
                    await updater.requires_input(
                        updater.new_agent_message([Part(text="\n".join(pending) or "input needed")])
                    )
                case DoneChunk(answer=answer) if narrated and answer:
                    await updater.add_artifact(  # the answer replaces what streamed before it
                        [Part(text=answer)],
                        artifact_id=artifact,
                        name="answer",
                        append=False,
                        last_chunk=True,
                    )
                    await _complete(updater, chunk)
                case DoneChunk(answer=answer):
                    if held is not None:
                        await emit(held, last=True)
                        held = None
                    elif not streamed and answer:
                        await emit(answer, last=True)
                    await _complete(updater, chunk)
                case AbortedChunk(reason=reason):
                    await updater.cancel(updater.new_agent_message([Part(text=reason)]))
                case ErrorChunk(message=message):
                    await updater.failed(updater.new_agent_message([Part(text=message)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.context_id:
            caller = caller_of(context.call_context)
            if caller.refused is not None:
                raise InvalidInputError(caller.refused)
            await self.hub.abort(self.project, session_for(context.context_id), scope=caller.scope)
        if context.task_id and context.context_id:
            await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


UNSAVED = (
    "The answer is complete, but this round could not be saved to the session's log: "
    "later messages in this context will not see it."
)


async def _complete(updater: TaskUpdater, done: DoneChunk) -> None:
    """``completed``; a round its session's log did not take (``done.saved`` false) says so in
    the status message and ``metadata.saved: false``, as REST's ``done`` event does."""
    if done.saved:
        await updater.complete()
    else:
        await updater.update_status(
            TaskState.TASK_STATE_COMPLETED,
            message=updater.new_agent_message([Part(text=UNSAVED)]),
            metadata={"saved": False},
        )


Guard = Callable[[Request, str, str], Awaitable[Response | None]]
"""``(request, access, project)`` -> a refusal, or None to let the request through."""


def a2a_routes(hub: Hub, *, secured: bool, guard: Guard) -> list[BaseRoute]:
    """The card routes and a JSON-RPC endpoint per project, each behind ``guard`` (which returns
    a refusal, or None to let the request through)."""
    routes: list[BaseRoute] = []
    names = list(hub.projects)

    def card_endpoint(project: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            refused = await guard(request, "read", project)
            if refused is not None:
                return refused
            card = agent_card(hub, project, str(request.base_url), secured=secured)
            return JSONResponse(agent_card_to_dict(card))

        return endpoint

    for name in names:
        base_card = agent_card(hub, name, "http://127.0.0.1", secured=secured)
        handler = DefaultRequestHandler(
            agent_executor=MemoraExecutor(hub, name),
            # each user's tasks apart: the store files a task under its caller's scope, and
            # every read of it (get, list, cancel, subscribe, a message continuing it) asks
            # with the reader's
            task_store=InMemoryTaskStore(owner_resolver=owner_of),
            agent_card=base_card,
        )
        # protocol 1.0 (SendMessage...) and 0.3 (message/send, message/stream) on one endpoint
        for route in create_jsonrpc_routes(
            handler,
            rpc_url=f"/a2a/{name}",
            context_builder=_CallerContexts(),
            enable_v0_3_compat=True,
        ):
            assert isinstance(route, Route)
            routes.append(_guarded(route, guard, name))
        routes.append(Route(f"/a2a/{name}/.well-known/agent-card.json", card_endpoint(name)))
    if names:
        routes.append(Route("/.well-known/agent-card.json", card_endpoint(names[0])))
    return routes


def _guarded(route: Route, guard: Guard, project: str) -> Route:
    inner = route.endpoint

    async def endpoint(request: Request) -> Any:
        refused = await guard(request, "write", project)
        if refused is not None:
            return refused
        # who calls, and as which user, for the task store and the executor (the SDK's call
        # context carries it); the body is read once here and kept by the request for the SDK
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None  # the SDK answers a body that is not JSON-RPC with its own error
        request.state.memora_caller = request_caller(
            getattr(request.state, "memora_token", None), request.headers.get(USER_HEADER), body
        )
        refused = _refused_schema(body)
        if refused is not None:
            return refused
        return await inner(request)

    return Route(route.path, endpoint, methods=list(route.methods or ["POST"]), name=route.name)
