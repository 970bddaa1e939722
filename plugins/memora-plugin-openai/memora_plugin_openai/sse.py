"""An incremental Server-Sent Events decoder.

Handles every way a stream may be cut: chunks split anywhere (inside a line, inside a UTF-8
character, between ``\\r`` and ``\\n``), ``\\n`` / ``\\r\\n`` / ``\\r`` line endings, multi-line
``data:`` fields (joined with ``\\n``), comments and keep-alives (``:`` lines), and fields other
than ``data`` (ignored).
"""

from __future__ import annotations

import codecs

__all__ = ["SSEDecoder", "SSELineTooLong"]

MAX_LINE = 8 * 1024 * 1024
"""Longest line (and event) the decoder buffers, in characters; a server that sends more
without a line break gets :class:`SSELineTooLong` instead of an ever-growing buffer."""


class SSELineTooLong(ValueError):
    """A line or an event grew past the decoder's limit."""


class SSEDecoder:
    __slots__ = ("_buf", "_data", "_decoder", "_max", "_size")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buf = ""
        self._data: list[str] = []
        self._size = 0
        self._max = max_line
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> list[str]:
        """Feed raw bytes; returns the data of every event completed by them."""
        text = self._decoder.decode(chunk)
        if (
            # the usual chunk from an LLM API: one whole single-line event, nothing pending
            # ("data: {...}\n\n") — its data at the cost of a few string checks
            not self._buf
            and not self._data
            and text.endswith("\n\n")
            and text.startswith("data:")
            and text.count("\n") == 2
            and "\r" not in text
            and len(text) - 7 <= self._max
        ):
            return [text[6:-2] if text[5] == " " else text[5:-2]]
        text = self._buf + text
        if "\r" in text:
            # keep a trailing \r: it may be the first half of \r\n
            tail = "\r" if text.endswith("\r") else ""
            text = (text[:-1] if tail else text).replace("\r\n", "\n").replace("\r", "\n")
        else:
            tail = ""
        lines = text.split("\n")
        self._buf = lines.pop() + tail
        if len(self._buf) > self._max:
            raise SSELineTooLong(f"an event-stream line longer than {self._max} characters")
        events: list[str] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append("\n".join(data))
                    data.clear()
                    self._size = 0
                continue
            if line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
                self._size += len(value)
                if self._size > self._max:
                    raise SSELineTooLong(f"an event longer than {self._max} characters")
            # comments (":"), event:, id:, retry: and unknown fields are ignored
        return events

    def flush(self) -> list[str]:
        """End of stream: an event without its final blank line still counts."""
        events = self.feed(b"\n\n") if self._buf or self._data else []
        return events
