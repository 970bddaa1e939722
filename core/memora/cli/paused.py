"""The paused turn `memora run` keeps for `memora run --resume` (``<data>/paused-turn.json``):
written sealed with the user's key when a turn pauses with nobody to answer, read back only when
that seal holds, and taken by one process at a time (:class:`PauseClaim`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import click

from ..errors import ErrorCode, MemoraError
from ..security.atomic import atomic_write_text
from ..security.seal import seal, unseal, user_key
from ..security.state import open_state_file

__all__ = ["MAX_PAUSED_BYTES", "PAUSED_FILE", "PauseClaim", "keep_pause", "read_paused"]

logger = logging.getLogger("memora.cli")

PAUSED_FILE = "paused-turn.json"
MAX_PAUSED_BYTES = 16 * 1024 * 1024
"""A paused turn's file larger than this is not one (its window is bounded far below)."""
_CLAIMED = ".claimed"


def keep_pause(agent: Any, state_file: Path, user_dir: Path) -> None:
    """A turn paused with nobody to answer: its state saved for `memora run --resume`."""
    paused = agent.paused_turn
    if paused is not None:  # private to the user, never half-written
        state = json.dumps(seal(paused.to_json(), user_key(user_dir)), ensure_ascii=False)
        atomic_write_text(state_file, state)
        os.chmod(state_file, 0o600)  # an older file's mode is not kept
    click.echo(
        f"turn paused; its state is in {state_file} — continue it with "
        "`memora run --resume` (add --yes to approve the pending call)",
        err=True,
    )


def read_paused(state_file: Path, key: bytes, *, shown: Path | None = None) -> dict[str, Any]:
    """The paused turn this user's `memora run` left in ``state_file`` (``shown``: the name
    messages give it); one found in a project's folder without this user's seal (cloned,
    copied, edited) is refused: resuming it with --yes would run a call someone else chose."""
    name = shown or state_file
    try:
        # never a link or a fifo (a cloned project's would hang the read), never unbounded
        fd = open_state_file(state_file, os.O_RDONLY | os.O_NONBLOCK, state_file.parent)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_PAUSED_BYTES + 1)
        if len(raw) > MAX_PAUSED_BYTES:
            raise ValueError(f"larger than {MAX_PAUSED_BYTES} bytes")
        doc = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"no paused turn to resume ({name} does not exist)",
            context={"path": str(name)},
        ) from None
    except (OSError, ValueError, RecursionError) as exc:
        raise MemoraError(ErrorCode.INVALID_INPUT, f"{name} is not a paused turn: {exc}") from exc
    data = unseal(doc, key)
    if data is None:
        raise MemoraError(
            ErrorCode.INVALID_INPUT,
            f"{name} was not sealed by your memora (a paused turn from another user or "
            "machine, a copied or cloned project, or a file changed since is never resumed): "
            "remove it and run the turn again",
            context={"path": str(name)},
        )
    if not isinstance(data, dict):
        raise MemoraError(ErrorCode.INVALID_INPUT, f"{name} is not a paused turn")
    return data


class PauseClaim:
    """The paused turn in ``state_file``, taken by this process alone: renamed — one atomic
    step — to a name of this process's before it is read, so a `memora runs cancel` or another
    `--resume` at the same moment finds it gone: one of them has it, never both (each used to
    read it, the cancel saying it dropped the pause while the resume ran the call it approved).

    :meth:`use` once the turn goes on (the pause is over); otherwise leaving the ``with`` gives
    it back, unless a newer pause took its place.  A claim whose process died before either is
    taken again by the next claim."""

    def __init__(self, state_file: Path, key: bytes) -> None:
        self.state_file = state_file
        self._used = False
        self.path = _claim(state_file)
        try:
            self.state = read_paused(self.path, key, shown=state_file)
        except BaseException:
            self.give_back()
            raise

    def use(self) -> None:
        """The paused turn goes on: its file is removed."""
        self._used = True
        self.path.unlink(missing_ok=True)

    def give_back(self) -> None:
        """Put the pause back where `--resume` finds it, unless a newer one is there."""
        if self._used:
            return
        self._used = True
        try:
            os.link(self.path, self.state_file, follow_symlinks=False)
        except FileExistsError:
            pass  # a later pause took its place: that one is the project's now
        except OSError as exc:  # a file system without hard links: a rename, if still free
            if not os.path.lexists(self.state_file):
                with contextlib.suppress(OSError):
                    os.rename(self.path, self.state_file)
                    return
            logger.warning("the paused turn in %s could not be put back: %s", self.path, exc)
            return
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> PauseClaim:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.give_back()


def _claim(state_file: Path) -> Path:
    """``state_file`` renamed to this process's claim (or a dead process's claim taken over);
    ``NOT_FOUND`` when there is none."""
    mine = state_file.with_name(f"{state_file.name}.{os.getpid()}{_CLAIMED}")
    try:
        os.rename(state_file, mine)
        return mine
    except FileNotFoundError:
        pass
    prefix = f"{state_file.name}."
    with contextlib.suppress(OSError):
        for left in sorted(state_file.parent.iterdir()):
            pid = left.name.removeprefix(prefix).removesuffix(_CLAIMED)
            if not (left.name.startswith(prefix) and left.name.endswith(_CLAIMED)):
                continue
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):  # another took it first
                    os.rename(left, mine)
                    return mine
    raise MemoraError(
        ErrorCode.NOT_FOUND,
        f"no paused turn to resume ({state_file} does not exist: none was kept, or it was "
        "resumed or cancelled meanwhile)",
        context={"path": str(state_file)},
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True
