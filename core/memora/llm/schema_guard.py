"""A JSON schema from outside is data, never an instruction.

A typed turn's ``output_schema`` comes from a REST client, an A2A or AG-UI peer, or a file named
on the command line.  Three consumers could be driven by it: ``jsonschema`` (which fetches a
``$ref`` it does not know and matches ``pattern`` with the stdlib ``re``, which nothing can
interrupt), a grammar builder such as llama.cpp's (native code that expands ``minLength: N``
into N rules and dies on a left-recursive grammar), and the prompt.  So a schema passes
:func:`check_schema` before any of them sees it, which refuses, naming the reason:

- anything that is not plain JSON, over :data:`MAX_SCHEMA_CHARS` or :data:`MAX_SCHEMA_DEPTH`;
- a ``$ref`` that is not ``#`` or a JSON pointer ``#/...`` into the document itself, one that
  points at nothing, more than :data:`MAX_SCHEMA_REFS` of them, ``$dynamicRef`` /
  ``$recursiveRef``, and a ``$id`` below the root (an embedded resource would move the base
  that refs resolve against);
- a ``$ref`` cycle with no object or array in between (``a -> b -> a``): no value could ever be
  checked against it, and as a grammar it is left-recursive;
- a ``pattern`` (or ``patternProperties`` key) over :data:`MAX_PATTERN_CHARS`, one whose
  counted repeats ask for more than :data:`MAX_SCHEMA_REPEAT` copies (``(a{100}){100}``:
  10,000), one the ``regex`` engine cannot compile, and ``unevaluatedProperties`` together with
  ``patternProperties`` (jsonschema matches those with ``re``, out of reach of a time limit);
- a length or count keyword (``minLength``, ``maxItems``...) over :data:`MAX_SCHEMA_REPEAT`;
- an unknown ``$schema``, then whatever the draft's own metaschema refuses.

An admitted schema is checked by :func:`bounded_validator`: jsonschema with a registry that
retrieves nothing, and ``pattern`` / ``patternProperties`` / ``additionalProperties`` matched by
the ``regex`` engine with the GIL released, every keyword under one deadline for the whole check
(:func:`schema_errors`, :data:`CHECK_SECONDS`), so a catastrophic pattern — or a schema whose
``$ref``s fan out exponentially — ends as :class:`SchemaCheckTimeout` instead of a stalled
process.  A host's own Python types are not data from outside and do not come through here.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import regex

from ..errors import InvalidInputError, NotAvailableError

__all__ = [
    "CHECK_SECONDS",
    "GRAMMAR_SECONDS",
    "MAX_GRAMMAR_CHARS",
    "MAX_PATTERN_CHARS",
    "MAX_SCHEMA_CHARS",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_REFS",
    "MAX_SCHEMA_REPEAT",
    "SchemaCheckTimeout",
    "bounded_validator",
    "check_schema",
    "preload",
    "schema_errors",
]

MAX_SCHEMA_CHARS = 16_384
"""The longest schema, as compact JSON.  jsonschema's check of a schema against the 2020-12
metaschema costs about 3 ms per KiB (measured: 25 ms for 9 KiB, 99 ms for 31 KiB) and runs
where the schema arrives, on a server's event loop: 16 KiB keeps it under ~50 ms.  16 KiB is
also ~4,000 tokens of prompt, the whole window of the bundled model."""

MAX_SCHEMA_DEPTH = 32
"""The deepest nesting of JSON objects and arrays in a schema (data in ``const`` / ``enum``
included): deep enough for ten levels of nested objects, shallow enough for every recursive
walk over it."""

MAX_SCHEMA_REFS = 100
"""The most ``$ref`` keywords in a schema: each is resolved, and each becomes a grammar rule."""

MAX_PATTERN_CHARS = 512
"""The longest ``pattern`` or ``patternProperties`` key (a full e-mail or URL pattern is
~200)."""

MAX_SCHEMA_REPEAT = 1000
"""The largest ``minLength`` / ``maxLength`` / ``minItems`` / ``maxItems`` / ``minProperties``
/ ``maxProperties`` / ``minContains`` / ``maxContains``, and the most copies the counted
repeats of a ``pattern`` ask for (nested ones multiplied).  A grammar builder writes one rule
per unit: llama.cpp refuses ``maxLength: 5000`` outright, and ``minLength: 5000`` held the
bundled model for minutes; at 1,000 the grammar stays under ~25 KB and sampling under 25 ms a
token (the bundled model, measured).  The ``regex`` engine also expands counted repeats when it
compiles: ``(?:a{1000}){1000}`` took 280 MB."""

CHECK_SECONDS = 2.0
"""The longest that checking one result against a schema may take; past it the result fails
with :class:`SchemaCheckTimeout` (a legitimate check of a model's answer takes milliseconds)."""

MAX_GRAMMAR_CHARS = 131_072
"""The longest grammar a grammar-constrained provider (the embedded llama.cpp model) is given;
a schema whose grammar is longer constrains the model less (memora still checks the result)."""

GRAMMAR_SECONDS = 20.0
"""The longest building and checking one schema's grammar may take, in its own process (the
embedded model's provider): llama.cpp's schema converter loops forever on some patterns."""

# keywords whose value is one schema, a list of schemas, or a map of name -> schema; the in-place
# ones apply to the same value (a $ref reached through them alone can recurse without end)
_ONE: tuple[str, ...] = ("additionalProperties", "unevaluatedProperties", "additionalItems")
_ONE += ("unevaluatedItems", "contains", "propertyNames", "items")
_ONE_IN_PLACE = ("not", "if", "then", "else")
_LISTS = ("prefixItems", "items")
_LISTS_IN_PLACE = ("allOf", "anyOf", "oneOf")
_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_MAPS_IN_PLACE = ("dependentSchemas", "dependencies")
_COUNTS: tuple[str, ...] = ("minLength", "maxLength", "minItems", "maxItems")
_COUNTS += ("minProperties", "maxProperties", "minContains", "maxContains")
_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "memora_schema_deadline", default=None
)


class SchemaCheckTimeout(Exception):
    """Checking a result took longer than :data:`CHECK_SECONDS` (a ``pattern`` too slow for
    the value it was matched against)."""


def _refuse(reason: str) -> InvalidInputError:
    return InvalidInputError(f"output_schema: {reason}")


# -- the door ---------------------------------------------------------------------------------


def check_schema(schema: Any) -> None:
    """Refuse a schema that is not plain data within the limits (see the module docstring),
    with ``INVALID_INPUT`` naming the reason.  Cheap checks first: a hostile schema is refused
    before jsonschema's metaschema check, the one costly step, ever runs."""
    if not isinstance(schema, dict):
        raise _refuse("must be a JSON object (a JSON schema)")
    _measure(schema)
    # the same schema comes back turn after turn (a client's fixed shape): its verdict is kept
    reason = _verdict(json.dumps(schema, ensure_ascii=False, separators=(",", ":")))
    if reason:
        raise _refuse(reason)


def _measure(schema: dict[str, Any]) -> None:
    """Refuse what is not plain JSON, too deep or too long, stopping as soon as a limit is
    passed (a megabyte of schema is not walked to its end)."""
    size = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_SCHEMA_DEPTH:
                raise _refuse(f"nested deeper than {MAX_SCHEMA_DEPTH} levels")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                if isinstance(node, dict):
                    if not isinstance(key, str):
                        raise _refuse("holds a key that is not a string (not JSON)")
                    size += len(key) + 4
                stack.append((value, depth + 1))
            size += 2
        elif isinstance(node, str):
            size += len(node) + 2
        elif isinstance(node, bool) or node is None:
            size += 5
        elif isinstance(node, int | float):
            if isinstance(node, float) and not math.isfinite(node):
                raise _refuse("holds a number that is not finite (not JSON)")
            size += 8
        else:
            raise _refuse(f"holds a {type(node).__name__}, which is not JSON")
        if size > MAX_SCHEMA_CHARS:
            raise _refuse(f"is over {MAX_SCHEMA_CHARS} characters as JSON")


@functools.lru_cache(maxsize=128)
def _verdict(text: str) -> str:
    """Why the schema written as ``text`` is refused, or ``""``."""
    if len(text) > MAX_SCHEMA_CHARS:
        return f"is over {MAX_SCHEMA_CHARS} characters as JSON ({len(text)})"
    schema = json.loads(text)
    try:
        refs = _check_keywords(schema)
        _check_cycles(schema, refs)
        _check_metaschema(schema)
    except InvalidInputError as exc:
        return exc.message.removeprefix("output_schema: ")
    return ""


Loc = tuple[str, ...]
"""Where a subschema sits: the keys from the root down (a JSON pointer, decoded)."""


def _pointer(path: Loc) -> str:
    """``path`` as a JSON pointer for a message: shortened, and a name's control characters
    written as escapes (a property name is data from outside; messages reach terminals)."""
    text = "#" + "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
    return text if len(text) <= 120 else text[:117] + "..."


def _children(node: dict[str, Any]) -> Iterator[tuple[Loc, Any, bool]]:
    """``(path below node, subschema, in place)`` of each subschema directly under ``node``;
    in place: it applies to the same value as ``node`` (not to a property or an item)."""
    for key in _ONE + _ONE_IN_PLACE:
        if isinstance(node.get(key), dict | bool):
            yield (key,), node[key], key in _ONE_IN_PLACE
    for key in _LISTS + _LISTS_IN_PLACE:
        if isinstance(node.get(key), list):
            for i, child in enumerate(node[key]):
                yield (key, str(i)), child, key in _LISTS_IN_PLACE
    for key in _MAPS + _MAPS_IN_PLACE:
        if isinstance(node.get(key), dict):
            for name, child in node[key].items():
                if isinstance(child, dict | bool):
                    yield (key, name), child, key in _MAPS_IN_PLACE


def _subschemas(root: Any, *, in_place: bool = False) -> Iterator[tuple[Loc, dict[str, Any]]]:
    """``(path, subschema)`` of ``root`` and every schema below it (``in_place``: only those
    that apply to the same value as ``root``).  Data (``const``, ``enum``, ``default``...) is
    never walked: a ``$ref`` inside it is a value, not a reference."""
    stack: list[tuple[Loc, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for below, child, same_value in _children(node):
            if same_value or not in_place:
                stack.append((path + below, child))


def _check_keywords(schema: dict[str, Any]) -> dict[str, Loc]:
    """Refuse a keyword outside the limits; the ``$ref``s, each with the path it points at."""
    refs: dict[str, Loc] = {}
    places: set[Loc] = set()
    count = 0
    patterned = unevaluated = False
    for path, node in _subschemas(schema):
        places.add(path)
        where = _pointer(path)
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in node:
                raise _refuse(f"{key} at '{where}' is not supported: use $ref '#/...'")
        if path and "$id" in node:
            raise _refuse(f"$id at '{where}': an embedded resource (only the root has one)")
        if "$ref" in node:
            count += 1
            if count > MAX_SCHEMA_REFS:
                raise _refuse(f"has more than {MAX_SCHEMA_REFS} $ref")
            ref = node["$ref"]
            refs[_local(ref)] = _path_of(ref)
        _check_counts(where, node)
        if isinstance(node.get("pattern"), str):
            _check_pattern(node["pattern"], f"pattern at '{where}'")
        if isinstance(node.get("patternProperties"), dict):
            patterned = True
            for key in node["patternProperties"]:
                _check_pattern(key, f"patternProperties key at '{where}'")
        unevaluated = unevaluated or "unevaluatedProperties" in node
    if patterned and unevaluated:
        raise _refuse(
            "unevaluatedProperties with patternProperties is not supported (checking it could "
            "not be bounded in time)"
        )
    for ref, path in refs.items():
        # a schema's place only: a ref into a map of properties or into data would make
        # jsonschema and the grammar builder read names and values as keywords
        if path not in places:
            raise _refuse(f"$ref {ref[:80]!r} does not point at a schema in the document")
    return refs


def _local(ref: Any) -> str:
    """``ref`` if it is ``#`` or a JSON pointer ``#/...``, else refused: nothing outside the
    document is followed (no URL fetched, no file read)."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        raise _refuse(
            f"$ref {str(ref)[:80]!r} points outside the schema: only '#' and '#/...' refs "
            "inside the document are followed (nothing is fetched, no file is read)"
        )
    return ref


def _path_of(ref: str) -> Loc:
    if ref == "#":
        return ()
    return tuple(unquote(p).replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))


def _check_counts(where: str, node: dict[str, Any]) -> None:
    for key in _COUNTS:
        value = node.get(key)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (value > MAX_SCHEMA_REPEAT)
        ):
            raise _refuse(
                f"{key} {value:g} at '{where}' is over {MAX_SCHEMA_REPEAT} (a grammar would "
                "hold a rule per unit)"
            )


def _check_pattern(pattern: str, where: str) -> None:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise _refuse(f"{where} is over {MAX_PATTERN_CHARS} characters")
    copies = _largest_repeat(pattern)
    if copies > MAX_SCHEMA_REPEAT:
        raise _refuse(f"{where} repeats up to {copies} times, over {MAX_SCHEMA_REPEAT}")
    try:
        regex.compile(pattern)
    except (regex.error, ValueError, OverflowError) as exc:
        raise _refuse(f"{where} is not a regular expression memora can run: {exc}") from None


def _largest_repeat(pattern: str) -> int:
    """The most copies the counted repeats of ``pattern`` ask for, nested ones multiplied
    (``(?:a{10}){20}``: 200; ``a*`` counts 1: nothing is copied for it).  A scan, not a
    parse: escapes and character classes are skipped, and a ``{`` that is no quantifier is a
    literal, as in ``re``."""
    frames = [1]  # the costliest element of each open group
    last = worst = 1  # the cost of the atom a quantifier would apply to
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        quantifier = _QUANTIFIER.match(pattern, i) if c == "{" else None
        if quantifier:
            low, high = quantifier.group(1), quantifier.group(2)
            count = int(high) if high else int(low or 0)
            last *= max(count, int(low or 0), 1)
            worst = max(worst, last)
            frames[-1] = max(frames[-1], last)
            i = quantifier.end()
            continue
        if c == "(":
            frames.append(1)
        elif c == ")" and len(frames) > 1:
            last = frames.pop()
            frames[-1] = max(frames[-1], last)
            i += 1
            continue
        elif c == "[":
            i = _class_end(pattern, i)
        elif c == "\\":
            i += 1
        last = 1
        i += 1
    return worst


def _class_end(pattern: str, start: int) -> int:
    """The index of the ``]`` that closes the character class opened at ``start``."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _check_cycles(schema: dict[str, Any], refs: dict[str, Loc]) -> None:
    """Refuse a ``$ref`` cycle that never passes through a property or an item: validating
    against it recurses without end, and as a grammar it is left-recursive (what killed the
    process on llama.cpp)."""

    def node_at(path: Loc) -> Any:
        node: Any = schema
        for part in path:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def follow(path: Loc) -> list[Loc]:
        if path not in edges:
            edges[path] = [
                refs[node["$ref"]]
                for _, node in _subschemas(node_at(path), in_place=True)
                if "$ref" in node
            ]
        return edges[path]

    edges: dict[Loc, list[Loc]] = {}
    done: set[Loc] = set()
    for start in [(), *refs.values()]:
        _walk_refs(start, follow, [], done)


def _walk_refs(path: Loc, follow: Any, trail: list[Loc], done: set[Loc]) -> None:
    if path in done:
        return
    if path in trail:
        loop = [*trail[trail.index(path) :], path]
        shown = " -> ".join(_pointer(p) for p in loop)
        raise _refuse(
            f"$ref cycle with no object or array in between ({shown[:200]}): no value could "
            "ever be checked against it"
        )
    trail.append(path)  # at most MAX_SCHEMA_REFS + 1 deep
    for target in follow(path):
        _walk_refs(target, follow, trail, done)
    trail.pop()
    done.add(path)


def _jsonschema() -> Any:
    try:
        import jsonschema  # type: ignore[import-untyped]  # optional: memora-kernel[schemas]
    except ImportError:
        raise NotAvailableError(
            "a result described by a JSON schema needs the jsonschema package: "
            "pip install 'memora-kernel[schemas]' (or pass a Python type as output_type)"
        ) from None
    return jsonschema


def preload() -> bool:
    """Import jsonschema now (~65 ms, its metaschemas read from disk), so the first schema a
    server receives does not pay for it on the event loop; a server calls this at start-up.
    ``False`` when jsonschema is not installed."""
    try:
        _jsonschema()  # referencing, which bounded_validator uses, comes with it
    except NotAvailableError:
        return False
    return True


def _check_metaschema(schema: dict[str, Any]) -> None:
    jsonschema = _jsonschema()
    declared = schema.get("$schema")
    if declared is not None:
        known = isinstance(declared, str) and jsonschema.validators.validator_for(
            schema, default=None
        )
        if not known:
            raise _refuse(f"$schema {str(declared)[:80]!r} is not a draft memora knows")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise _refuse(f"not a valid JSON schema: {exc.message[:300]}") from None


# -- checking a result ------------------------------------------------------------------------


def bounded_validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator for a schema :func:`check_schema` admitted: its registry
    retrieves nothing (an unknown URI is an error, never a request), and every regular
    expression is matched by :func:`_search` under the check's deadline."""
    check_schema(schema)
    jsonschema = _jsonschema()
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    def retrieve(uri: str) -> Any:
        raise NoSuchResource(uri)

    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return _bounded_class(base)(schema, registry=Registry(retrieve=retrieve))  # type: ignore[call-arg]


@functools.cache
def _bounded_class(base: Any) -> Any:
    """``base`` (a draft's validator class) with its three regex keywords on ``regex``, and
    every keyword under the check's deadline: a schema within every limit can still cost time
    exponential in its size — 40 ``$defs``, each ``allOf`` the next one twice, is 2**40 checks
    of one string — and only a deadline looked at on each keyword ends that."""
    validators = _jsonschema().validators
    own = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    keywords = {**base.VALIDATORS, **own}
    return validators.extend(base, {k: _timed(f) for k, f in keywords.items()})


def _timed(keyword: Any) -> Any:
    """``keyword`` (a jsonschema keyword function) refused past the check's deadline."""

    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        deadline = _DEADLINE.get()
        if deadline is not None and time.monotonic() > deadline:
            raise SchemaCheckTimeout(_TIMEOUT)
        return keyword(validator, value, instance, schema)

    return check


def _search(pattern: str, text: str) -> bool:
    """``re.search`` semantics on the ``regex`` engine: the GIL released while it runs (an
    event loop in another thread keeps answering) and a time limit, the check's deadline."""
    deadline = _DEADLINE.get()
    left = CHECK_SECONDS if deadline is None else deadline - time.monotonic()
    if left <= 0:
        raise SchemaCheckTimeout(_TIMEOUT)
    try:
        return regex.search(pattern, text, timeout=left, concurrent=True) is not None
    except TimeoutError:
        raise SchemaCheckTimeout(_TIMEOUT) from None


_TIMEOUT = (
    f"checking the answer took over {CHECK_SECONDS:g} s (a pattern or a schema too costly for it)"
)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield _jsonschema().ValidationError(f"{instance[:80]!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``additionalProperties`` with the ``patternProperties`` keys matched by
    :func:`_search`."""
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        key for key in instance if key not in known and not any(_search(p, key) for p in patterns)
    ]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        shown = ", ".join(repr(key[:40]) for key in sorted(extras)[:5])
        yield _jsonschema().ValidationError(
            f"Additional properties are not allowed ({shown} unexpected)"
        )


def schema_errors(
    validator: Any, data: Any, *, seconds: float = CHECK_SECONDS
) -> list[tuple[str, str]]:
    """``(dotted path, message)`` of each way ``data`` breaks the schema, shortest path first
    (messages capped: a model's huge wrong value is not echoed back whole).  All of it within
    ``seconds``, else :class:`SchemaCheckTimeout`; call it off the event loop."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        found = []
        for error in validator.iter_errors(data):
            found.append(error)
            if len(found) >= 50:  # enough to tell the model; the rest would only cost time
                break
    except RecursionError:
        return [("", "the answer nests too deep to be checked")]
    except (ArithmeticError, ValueError):
        # NaN, Infinity or 1e999 (Python's json reads them) against multipleOf and the like
        return [("", "the answer holds a number that cannot be checked (NaN or infinite)")]
    finally:
        _DEADLINE.reset(token)
    found.sort(key=lambda e: (len(e.absolute_path), str(e.path)))
    return [(".".join(str(p) for p in e.absolute_path), str(e.message)[:200]) for e in found]
