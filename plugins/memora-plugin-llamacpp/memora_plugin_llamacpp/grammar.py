"""Grammars for the embedded model, built where a hang or a crash cannot take memora down.

llama.cpp constrains a typed turn's answer with a GBNF grammar that llama-cpp-python converts
from the JSON schema.  Both steps fail badly on some schemas: the converter (pure Python) loops
forever on a ``pattern`` such as ``^[[:alpha:]]+$``, and writes grammars llama.cpp cannot parse
(``\\d`` in a pattern, a left-recursive ``$ref`` cycle); llama.cpp then hands back no sampler,
and llama-cpp-python uses it anyway, which kills the process (SIGSEGV).  So each schema's
grammar is built and parsed once in a child process (``python -I -m
memora_plugin_llamacpp.grammar``), under :data:`~memora.llm.schema_guard.GRAMMAR_SECONDS`;
the model only ever gets a grammar llama.cpp has already parsed.

A schema whose grammar fails is not refused: the model gets the closest grammar that works —
the schema without its ``pattern`` keywords, else any JSON value — and memora still checks the
answer against the whole schema (a warning names what was dropped and why).  A child that
crashes or runs out of time is a :class:`~memora.llm.ProviderError` naming the reason.  A tool's
parameters, which llama-cpp-python turns into a grammar itself, are checked the same way and
must convert exactly (llama-cpp-python falls back to plain JSON only on a converter error).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memora.llm import ProviderError
from memora.llm.schema_guard import GRAMMAR_SECONDS, MAX_GRAMMAR_CHARS

__all__ = ["Built", "Grammars"]

_CACHED = 64


@dataclass(frozen=True)
class Built:
    """A grammar llama.cpp parsed: ``text`` (GBNF, ``None`` when none could be built), what
    it constrains (``kept``: ``"schema"``, ``"schema without patterns"`` or ``"JSON"``), and
    why each closer step failed."""

    text: str | None
    kept: str
    reasons: tuple[str, ...]
    converted: bool = True
    """Whether the schema as given converted without an error (what llama-cpp-python needs
    for a tool's parameters: on a converter error it falls back to plain JSON itself)."""


class Grammars:
    """One provider's grammars, by schema: built in a child process, the last
    ``_CACHED`` kept (a host asks for the same shape turn after turn)."""

    def __init__(self, *, seconds: float = GRAMMAR_SECONDS) -> None:
        self.seconds = seconds
        self._built: OrderedDict[tuple[str, bool], Built] = OrderedDict()

    async def build(self, schema: Any, *, exact: bool = False) -> Built:
        """The grammar for ``schema`` (``exact``: only the schema as given, for a tool's
        parameters).  :class:`~memora.llm.ProviderError` when the child crashes or runs out
        of time."""
        return (await self.build_all([schema], exact=exact))[0]

    async def build_all(self, schemas: list[Any], *, exact: bool = False) -> list[Built]:
        """:meth:`build` for each of ``schemas``, those not kept built in one child."""
        keys = [(json.dumps(s, sort_keys=True, ensure_ascii=False), exact) for s in schemas]
        missing = list(dict.fromkeys(k for k in keys if k not in self._built))
        if missing:
            built = await self._in_child([json.loads(k) for k, _ in missing], exact)
            self._built.update(zip(missing, built, strict=True))
        for key in keys:
            self._built.move_to_end(key)
        answer = [self._built[k] for k in keys]
        while len(self._built) > _CACHED:
            self._built.popitem(last=False)
        return answer

    async def _in_child(self, schemas: list[Any], exact: bool) -> list[Built]:
        # -I: the project folder (the working directory) is never on the child's path
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-m",
            __name__,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        request = json.dumps({"schemas": schemas, "exact": exact}).encode()
        limit = self.seconds * len(schemas)
        try:
            out, _ = await asyncio.wait_for(process.communicate(request), limit)
        except BaseException as exc:
            # out of time, or the turn was cancelled: the child goes with it
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            if isinstance(exc, TimeoutError):
                raise ProviderError(
                    f"building the grammar for a schema took over {limit:g} s"
                ) from None
            raise
        if process.returncode != 0:
            code = process.returncode or 0
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            raise ProviderError(
                f"llama.cpp could not build a grammar from the schema (its process ended "
                f"with {how})"
            )
        return [
            Built(a["text"], a["kept"], tuple(a["reasons"]), bool(a["converted"]))
            for a in json.loads(out.decode("utf-8"))
        ]


# -- the child --------------------------------------------------------------------------------


class _OutOfTime(Exception):
    pass


def _without_patterns(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_patterns(v) for k, v in node.items() if k != "pattern"}
    if isinstance(node, list):
        return [_without_patterns(v) for v in node]
    return node


def _candidates(schema: Any, exact: bool) -> Iterator[tuple[str, Any]]:
    yield "schema", schema
    if not exact:
        yield "schema without patterns", _without_patterns(schema)
        yield "JSON", None


def _on_alarm(signum: int, frame: Any) -> None:
    raise _OutOfTime


def _convert(schema: Any, seconds: float) -> str:
    """llama-cpp-python's conversion of ``schema`` (``None``: any JSON value), interrupted
    after ``seconds`` (its pattern parser can loop forever)."""
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    if schema is None:
        return str(JSON_GBNF)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return str(json_schema_to_gbnf(json.dumps(schema)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _parse(text: str) -> str:
    """``""`` when llama.cpp parses ``text`` into a sampler, else what it said (its parser
    writes to the C stderr, read back here from a temporary file).  No vocabulary is needed
    to parse: llama.cpp's own grammar tests pass none."""
    import llama_cpp

    with tempfile.TemporaryFile() as said:
        saved = os.dup(2)
        os.dup2(said.fileno(), 2)
        try:
            sampler = llama_cpp.llama_sampler_init_grammar(None, text.encode("utf-8"), b"root")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
        said.seek(0)
        lines = said.read(64_000).decode("utf-8", "replace").splitlines()
    problem = " ".join(s.strip() for s in lines if "error" in s or "unsupported" in s)
    if sampler and not problem:
        return ""
    return problem[:300] or "llama.cpp refused the grammar"


def _one(schema: Any, exact: bool) -> dict[str, Any]:
    reasons: list[str] = []
    converted = True
    step_seconds = GRAMMAR_SECONDS / 4  # three steps and the imports fit the parent's limit
    for label, candidate in _candidates(schema, exact):
        try:
            text = _convert(candidate, step_seconds)
        except _OutOfTime:
            reasons.append(f"{label}: the converter ran over {step_seconds:g} s")
            continue
        except Exception as exc:  # the converter's asserts and errors: it cannot express it
            converted = converted and label != "schema"
            reasons.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if len(text) > MAX_GRAMMAR_CHARS:
            reasons.append(f"{label}: a grammar of {len(text)} characters")
            continue
        problem = _parse(text)
        if problem:
            reasons.append(f"{label}: {problem}")
            continue
        return {"text": text, "kept": label, "reasons": reasons, "converted": converted}
    return {"text": None, "kept": "", "reasons": reasons, "converted": converted}


def _child() -> int:
    request = json.loads(sys.stdin.buffer.read())
    exact = bool(request["exact"])
    sys.stdout.write(json.dumps([_one(schema, exact) for schema in request["schemas"]]))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
