"""Path guard: every path a tool touches is resolved (symlinks included) and must fall inside
``allowed_paths`` (default: the project root).

Files are then opened relative to a directory descriptor with ``O_NOFOLLOW`` and re-checked
through the descriptor, so a symlink swapped in between the check and the use is refused instead
of followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import ToolError, ToolErrorCode

__all__ = ["PathGuard", "stays_within"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not hang


def _loops(path: Path) -> bool:
    """Whether ``path`` is a symbolic link chain that never reaches a file."""
    try:
        os.path.realpath(path, strict=True)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def read_regular(
    path: Path | str, limit: int, *, dir_fd: int | None = None, skip_larger: bool = False
) -> bytes | None:
    """Up to ``limit`` bytes of ``path`` if it is a regular file, else None — a FIFO, socket or
    device is skipped without blocking (opened non-blocking, checked on the descriptor), a link
    is not followed.  With ``dir_fd``, ``path`` is a name inside that open folder (no second
    resolution of the folder's path, so a folder swapped for a link meanwhile changes nothing).
    ``skip_larger``: None for a file of more than ``limit`` bytes instead of its start."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (skip_larger and st.st_size > limit):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def stays_within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """True when ``path``, its links followed, is ``root`` or inside it (``root``'s links
    followed too): a file a project brought that is a link out of its folder is not."""
    try:
        return _within(os.path.realpath(path), os.path.realpath(root))
    except (OSError, ValueError):
        return False


class PathGuard:
    """Resolves the paths tools are given and refuses what is outside ``allowed_paths``
    (default: the project) — and, inside them, what is in ``hidden``: memora's own data (the
    sessions' logs and the memory database, every user's) and the user's config folder (keys,
    server tokens), which no tool reads or writes whatever the allowed paths say."""

    def __init__(
        self,
        project: Path,
        allowed_paths: Sequence[Path] | None = None,
        hidden: Sequence[Path] = (),
    ) -> None:
        self.project = Path(os.path.realpath(project))
        roots = allowed_paths if allowed_paths else [self.project]
        self.roots = [os.path.realpath(p) for p in roots]
        self.hidden = [os.path.realpath(p) for p in hidden]

    def display(self, path: Path | str) -> str:
        """A path as the model should see it: relative to the project when inside it."""
        p = str(path)
        root = str(self.project)
        if _within(p, root):
            rel = os.path.relpath(p, root)
            return "." if rel == "." else rel.replace(os.sep, "/")
        return p

    def _allowed_text(self) -> str:
        return ", ".join(
            self.display(r) if r != str(self.project) else "the project" for r in self.roots
        )

    def resolve(self, user_path: str, *, purpose: str = "access") -> Path:
        """Resolve ``user_path`` (relative to the project) and check it is allowed."""
        if not isinstance(user_path, str):
            raise ToolError(ToolErrorCode.INVALID_ARGS, "path must be a string")
        if "\x00" in user_path:
            raise ToolError(ToolErrorCode.INVALID_ARGS, "path contains a NUL byte")
        if not user_path.strip():
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, "path is empty; use '.' for the project root"
            )
        if user_path.startswith("~"):
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"{user_path!r}: home-relative paths are not allowed; use a path inside {self._allowed_text()}",
            )
        raw = Path(user_path)
        candidate = raw if raw.is_absolute() else self.project / raw
        try:
            resolved = os.path.realpath(candidate)
        except (OSError, ValueError) as exc:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"{user_path!r} is not a valid path: {exc}"
            ) from exc
        if not any(_within(resolved, root) for root in self.roots):
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"{user_path!r} resolves outside the allowed paths ({self._allowed_text()}); "
                f"{purpose} only inside them",
            )
        if any(_within(resolved, h) for h in self.hidden):
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"{user_path!r} is memora's own data (sessions, memory, keys); no tool may "
                f"{purpose} there — recall memories with memory_search",
            )
        return Path(resolved)

    def check_fd(self, fd: int, expected: Path) -> None:
        """Re-check an open descriptor: it must still be the allowed file we resolved."""
        proc = f"/proc/self/fd/{fd}"
        if sys.platform.startswith("linux") and os.path.exists(proc):
            real = os.path.realpath(proc)
            if not any(_within(real, root) for root in self.roots):
                raise ToolError(
                    ToolErrorCode.PATH_NOT_ALLOWED,
                    f"{self.display(expected)} changed into a link outside the allowed paths while being opened",
                )
            return
        st = os.fstat(fd)
        try:
            now = os.stat(expected, follow_symlinks=False)
        except OSError as exc:
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND, f"{self.display(expected)} vanished"
            ) from exc
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"{self.display(expected)} changed while being opened",
            )

    def open_read(self, user_path: str) -> tuple[int, Path]:
        """Open an allowed regular file for reading; returns ``(fd, resolved)``."""
        resolved = self.resolve(user_path, purpose="read")
        try:
            fd = os.open(resolved, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
        except FileNotFoundError:
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND,
                f"{self.display(resolved)} does not exist; use list_dir or search_project to find the right path",
            ) from None
        except IsADirectoryError:
            raise ToolError(
                ToolErrorCode.INVALID_ARGS, f"{self.display(resolved)} is a directory; use list_dir"
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                if _loops(resolved):
                    raise ToolError(
                        ToolErrorCode.INVALID_ARGS,
                        f"{self.display(resolved)} is a symbolic link that loops back on itself",
                    ) from exc
                raise ToolError(
                    ToolErrorCode.PATH_NOT_ALLOWED,
                    f"{self.display(resolved)} became a symbolic link after it was checked; refused",
                ) from exc
            if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a unix socket, a device
                raise ToolError(
                    ToolErrorCode.INVALID_ARGS,
                    f"{self.display(resolved)} is not a regular file (a socket or device); refused",
                ) from exc
            raise ToolError(
                ToolErrorCode.PERMISSION_DENIED,
                f"cannot open {self.display(resolved)}: {exc.strerror}",
            ) from exc
        try:
            self.check_fd(fd, resolved)
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(
                    ToolErrorCode.INVALID_ARGS,
                    f"{self.display(resolved)} is a directory; use list_dir",
                )
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(
                    ToolErrorCode.PERMISSION_DENIED,
                    f"{self.display(resolved)} is not a regular file (device, pipe or socket)",
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, resolved

    @contextlib.contextmanager
    def _parent_fd(self, resolved: Path) -> Iterator[int]:
        parent = resolved.parent
        try:
            dfd = os.open(parent, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except FileNotFoundError:
            raise ToolError(
                ToolErrorCode.FILE_NOT_FOUND, f"folder {self.display(parent)} does not exist"
            ) from None
        except OSError as exc:
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"cannot use folder {self.display(parent)}: {exc.strerror}",
            ) from exc
        try:
            self.check_fd(dfd, parent)
            yield dfd
        finally:
            os.close(dfd)

    def _make_parents(self, resolved: Path) -> None:
        """Create the missing folders above ``resolved`` through directory descriptors: the
        deepest existing one is opened and re-checked, each new one is made and opened
        relative to its parent without following links — an ancestor swapped for a symlink
        meanwhile cannot make memora create a folder outside."""
        missing: list[str] = []
        base = resolved.parent
        while not base.exists():
            missing.append(base.name)
            base = base.parent
        if not missing:
            return
        try:
            fd = os.open(base, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except OSError as exc:
            raise ToolError(
                ToolErrorCode.PATH_NOT_ALLOWED,
                f"cannot use folder {self.display(base)}: {exc.strerror}",
            ) from exc
        try:
            self.check_fd(fd, base)
            for name in reversed(missing):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                try:
                    nxt = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
                except OSError as exc:
                    raise ToolError(
                        ToolErrorCode.PATH_NOT_ALLOWED,
                        f"folder {name!r} under {self.display(base)} changed while being made",
                    ) from exc
                os.close(fd)
                fd = nxt
        finally:
            os.close(fd)

    def write_atomic(self, user_path: str, data: bytes, *, create_dirs: bool = True) -> Path:
        """Write ``data`` to an allowed path atomically (temp file + rename in the same folder).

        The target itself is never followed if it is a symlink: the rename replaces the link.
        """
        resolved = self.resolve(user_path, purpose="write")
        if resolved.is_dir():
            raise ToolError(ToolErrorCode.INVALID_ARGS, f"{self.display(resolved)} is a directory")
        if create_dirs:
            self._make_parents(resolved)
        with self._parent_fd(resolved) as dfd:
            mode = 0o644
            with contextlib.suppress(OSError):
                mode = stat.S_IMODE(
                    os.stat(resolved.name, dir_fd=dfd, follow_symlinks=False).st_mode
                )
            tmp_name = f".{resolved.name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(
                tmp_name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
                mode,
                dir_fd=dfd,
            )
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp_name, resolved.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name, dir_fd=dfd)
                raise
            with contextlib.suppress(OSError):
                os.fsync(dfd)
        return resolved
