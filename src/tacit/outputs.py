"""Output files written atomically: a reader, a crash or a kill sees the previous file or the
complete new one, never a part.

Every file tacit writes for a user goes through :func:`atomic_output`: the data goes to a
temporary file beside the destination, is flushed to disk, and is renamed over the
destination only when all of it was written. An error on the way removes the temporary file
and leaves the destination as it was; an operating-system error becomes an
:class:`~tacit.errors.OutputError` naming the file. A process killed outright (SIGKILL, a
crash of the machine) cannot remove its temporary file: the name holds the writer's process
id, and the next write of the same destination removes those whose process is gone.
"""

from __future__ import annotations

import glob
import gzip
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from tacit.errors import ConfigError, OutputError

STDIO = "-"
"""The name that means a standard stream: the standard output for an output file (the standard
input for an input, which the command line spools to a file)."""


@contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` when the ``with`` block ends without an error
    (gzip-compressed when the name ends in ``.gz``). Missing parent directories are created;
    an existing file keeps its permissions; a symbolic link stays, its target is replaced.
    ``path`` :data:`STDIO` is the standard output."""
    p = Path(os.path.realpath(path))  # through a symbolic link: it is the target that is written
    if str(path) == STDIO:
        with _output_errors(p):
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        return
    if p.is_dir():
        raise OutputError("is a directory, not a file", path=str(p))
    if p.exists() and not p.is_file():  # a device or pipe (/dev/stdout): nothing to replace
        with _output_errors(p), p.open("wb") as raw:
            yield from _maybe_gzip(p, raw)
        return
    above = next((a for a in p.parents if a.exists()), None)  # the directory to create it in
    if above is not None and not above.is_dir():
        raise OutputError(f"cannot write: {above} is not a directory", path=str(p))
    with _output_errors(p):
        p.parent.mkdir(parents=True, exist_ok=True)
        mode = p.stat().st_mode & 0o777 if p.exists() else 0o666 & ~_umask()
        _remove_abandoned(p)
        prefix = f"{_stem(p)}{os.getpid()}."
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=prefix, suffix=_PARTIAL)
    try:
        with _output_errors(p):
            with os.fdopen(fd, "wb") as raw:
                yield from _maybe_gzip(p, raw)
                raw.flush()
                os.fsync(raw.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_PARTIAL = ".partial"


def _stem(p: Path) -> str:
    """How the names of the temporary files writing ``p`` begin (the writer's process id and
    a random part follow)."""
    return f".{p.name}."


def _remove_abandoned(p: Path) -> None:
    """Remove the temporary files of earlier writes of ``p`` whose process no longer runs
    (killed before it could remove its own)."""
    for tmp in p.parent.glob(f"{glob.escape(_stem(p))}*{_PARTIAL}"):
        pid = tmp.name[len(_stem(p)) :].split(".", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _maybe_gzip(p: Path, raw: BinaryIO) -> Iterator[BinaryIO]:
    """Yields ``raw``, or a gzip stream into it when ``p`` ends in ``.gz``."""
    if p.name.endswith(".gz"):
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6) as gz:
            yield gz  # type: ignore[misc]  # GzipFile is a binary file
    else:
        yield raw


@contextmanager
def _output_errors(p: Path) -> Iterator[None]:
    """Operating-system errors while writing ``p`` as :class:`OutputError` naming it."""
    try:
        yield
    except OSError as e:
        raise OutputError(f"cannot write: {e.strerror or e}", path=str(p)) from e


def output_directory(path: str | Path) -> Path:
    """``path`` as a directory that exists (made with its parents when absent), or an
    :class:`OutputError` naming it."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(
            f"cannot make the output directory: {e.strerror or e}", path=str(out)
        ) from e
    return out


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, gzip-compressed when the name ends in ``.gz``."""
    with atomic_output(path) as f:
        f.write(data)


def refuse_input_as_output(output: str | Path, inputs: Iterable[str | Path]) -> None:
    """Raise :class:`ConfigError` when ``output`` is one of ``inputs`` (the same file, by any
    name): writing it would destroy what is being read."""
    out = Path(output)
    if not out.exists():
        return
    for given in inputs:
        src = Path(given)
        files = src.iterdir() if src.is_dir() else [src]
        for f in files:
            if f.exists() and os.path.samefile(f, out):
                raise ConfigError(f"{output} is also an input: choose another output file")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
