"""Text from outside never drives a terminal.

A model's answer, a tool's result, an MCP server's description or a file's content is data.
Printed as it is, an escape sequence in it can write the clipboard (OSC 52), plant a link whose
text lies about its target (OSC 8), set the window title, clear the screen or move the cursor to
overwrite what the user just read.  Two layers keep that from happening:

- :func:`clean` drops every control character and escape sequence from a string (newlines and
  tabs stay).  Every place that hands outside text to the terminal or to the renderer calls it.
- :class:`TerminalGuard` wraps the command line's ``stdout``/``stderr``: it lets through only
  the sequences the renderer (Rich) itself writes — colours and styles (SGR) and the hyperlinks
  it renders from Markdown always; the cursor steps, line erases, carriage returns and
  show/hide cursor of a live display only while one runs (:func:`live_display`) — and drops any
  other, so a string a code path forgot to clean still cannot reach the terminal as a command,
  nor move the cursor to overwrite what the user read.

Because both drop the introducer (ESC, or a C1 control) wherever it appears, a sequence split
across two chunks of a stream cannot be reassembled either.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["TerminalGuard", "clean", "install_guard", "live_display"]

# C0 controls but \t and \n, DEL, C1 controls (0x80-0x9f, which include the 8-bit CSI/OSC/DCS
# introducers), and the bidirectional overrides and isolates that reorder what is displayed
# ("Trojan Source"), plus the line and paragraph separators some terminals act on.
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029"

_SEQUENCE = re.compile(
    r"""
    \x1b\[[0-?]*[ -/]*[@-~]?                 # CSI ... final byte
  | \x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?  # OSC ... BEL or ST
  | \x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?    # DCS, SOS, PM, APC ... ST
  | \x1b[ -/]*[0-~]?                          # two- and three-byte escapes (and a lone ESC)
  | \x9b[0-?]*[ -/]*[@-~]?                    # 8-bit CSI
  | \x9d[^\x07\x9c]*(?:\x07|\x9c)?            # 8-bit OSC
  | [\x90\x98\x9e\x9f][^\x9c]*\x9c?           # 8-bit DCS, SOS, PM, APC
    """,
    re.VERBOSE,
)
_CONTROLS = re.compile(f"[{_CONTROL}]")
_SURROGATES = re.compile("[\ud800-\udfff]")
# the same but carriage return, which the renderer's live displays use to redraw a line
_CONTROLS_BUT_CR = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def clean(text: str, *, newlines: bool = True) -> str:
    """``text`` without escape sequences and control characters (``\\n`` and ``\\t`` kept;
    ``\\r\\n`` becomes ``\\n``).  ``newlines=False`` turns newlines and tabs into spaces too, for
    text that must stay on one line (a table cell, a prompt)."""
    if text.isprintable():
        return text  # the common case: nothing to do (isprintable is False for \n, \t, ESC...)
    out = _CONTROLS.sub("", _SEQUENCE.sub("", text.replace("\r\n", "\n")))
    # a lone surrogate (a JSON escape like \ud800 from a file or a server) cannot be written
    out = _SURROGATES.sub("\ufffd", out)
    if not newlines:
        out = out.replace("\n", " ").replace("\t", " ")
    return out


# What the renderer writes itself: SGR styles and OSC 8 hyperlinks in the form Rich writes them
# (always); cursor up/down/forward/back and to a column, erase in line, show/hide cursor and a
# carriage return (Rich's live displays and progress bars: only while one runs).
_OWN = re.compile(
    r"""
    \x1b\[[0-9;:]*m
  | \x1b\]8;[^\x07\x1b;]*;[^\x07\x1b]*\x1b\\
    """,
    re.VERBOSE,
)
_OWN_LIVE = re.compile(
    r"""
    \x1b\[[0-9;:]*m
  | \x1b\[[0-9]*[ABCDGK]
  | \x1b\[\?25[hl]
  | \x1b\]8;[^\x07\x1b;]*;[^\x07\x1b]*\x1b\\
    """,
    re.VERBOSE,
)
_live = 0


@contextlib.contextmanager
def live_display() -> Iterator[None]:
    """While a live display (Rich's ``Live``, ``Progress``) runs, the guard also passes its
    cursor steps, line erases and carriage returns; outside one, they are dropped."""
    global _live
    _live += 1
    try:
        yield
    finally:
        _live -= 1


def _guard(text: str) -> str:
    if text.isprintable():
        return text
    live = _live > 0
    own = _OWN_LIVE if live else _OWN
    strip = _strip_live if live else _strip
    out: list[str] = []
    pos = 0
    for match in own.finditer(text):
        out.append(strip(text[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(strip(text[pos:]))
    return "".join(out)


def _strip(text: str) -> str:
    return _CONTROLS.sub("", _SEQUENCE.sub("", text.replace("\r\n", "\n")))


def _strip_live(text: str) -> str:
    return _CONTROLS_BUT_CR.sub("", _SEQUENCE.sub("", text))


class TerminalGuard(io.TextIOBase):
    """A text stream that forwards to ``stream`` everything but escape sequences and controls
    other than the renderer's own (see the module docstring)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def write(self, s: str) -> int:
        self._stream.write(_guard(s))
        return len(s)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8") or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._stream, "errors", None)

    @property
    def buffer(self) -> Any:
        # bytes written here bypass the guard: memora writes none to a terminal
        return getattr(self._stream, "buffer", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install_guard() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in a :class:`TerminalGuard` (once) where they are
    terminals.  A stream redirected to a file or a pipe carries data (``memora memory export``
    writes JSON lines, whose text may hold any character) and is left exact; text a command
    prints for reading is cleaned where it is printed."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, TerminalGuard):
            continue
        try:
            terminal = stream.isatty()
        except (AttributeError, ValueError):
            terminal = False
        if terminal:
            setattr(sys, name, TerminalGuard(stream))
