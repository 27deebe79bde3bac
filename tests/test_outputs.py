"""Outputs are written atomically: the previous file survives any failure, a kill included."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tacit.errors import ConfigError, OutputError
from tacit.outputs import atomic_output, refuse_input_as_output, write_bytes


def test_a_complete_write_replaces_the_file_and_keeps_its_permissions(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    out.write_bytes(b"old")
    out.chmod(0o640)
    write_bytes(out, b"new")
    assert out.read_bytes() == b"new" and out.stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["a.json"]


def test_gz_names_are_compressed(tmp_path: Path) -> None:
    write_bytes(tmp_path / "sub" / "a.json.gz", b"x" * 1000)
    assert gzip.decompress((tmp_path / "sub" / "a.json.gz").read_bytes()) == b"x" * 1000


def test_an_error_while_writing_leaves_the_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_output(out) as f:
        f.write(b"partial")
        raise RuntimeError("the writer failed")
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["a.json"]


def test_a_kill_while_writing_leaves_the_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    out.write_bytes(b"old")
    code = (
        "import os, signal, sys\n"
        "from tacit.outputs import atomic_output\n"
        "with atomic_output(sys.argv[1]) as f:\n"
        "    f.write(b'x' * 4_000_000)\n"
        "    f.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(out)], check=False)
    assert proc.returncode == -signal.SIGKILL
    assert out.read_bytes() == b"old"
    (left,) = tmp_path.glob(".a.json.*.partial")  # a killed process cannot remove it
    mine = tmp_path / f".a.json.{os.getpid()}.x.partial"  # a write still running
    mine.write_bytes(b"")
    write_bytes(out, b"new")
    assert not left.exists() and mine.exists() and out.read_bytes() == b"new"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (lambda d: d, "is a directory"),
        (lambda d: d / "file" / "under" / "it.json", "file is not a directory"),
        (lambda d: Path("/dev/full"), "No space left on device"),
    ],
)
def test_unwritable_outputs_are_output_errors_naming_the_file(tmp_path, target, message) -> None:
    (tmp_path / "file").write_bytes(b"")
    path = target(tmp_path)
    with pytest.raises(OutputError, match=message) as e:
        write_bytes(path, b"data" * 100_000)
    assert str(path) in str(e.value)
    assert Path("/dev/full").is_char_device()  # never replaced by a regular file


def test_an_input_is_never_an_output(tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(b"{}")
    (tmp_path / "link.json").symlink_to(src)
    for same in (src, tmp_path / "link.json", tmp_path / "." / "in.json"):
        with pytest.raises(ConfigError, match="also an input"):
            refuse_input_as_output(same, [src])
    with pytest.raises(ConfigError, match="also an input"):
        refuse_input_as_output(src, [tmp_path])  # a directory of inputs holds it
    refuse_input_as_output(tmp_path / "new.json", [src])


def test_sigterm_while_writing_leaves_the_previous_file_and_no_partial(tmp_path: Path) -> None:
    """The command line turns SIGTERM into an exit that unwinds: the output being written is
    removed, the previous one kept."""
    out = tmp_path / "a.json"
    out.write_bytes(b"old")
    code = (
        "import os, signal, sys, time\n"
        "from tacit.cli.main import terminate\n"
        "from tacit.outputs import atomic_output\n"
        "signal.signal(signal.SIGTERM, terminate)\n"
        "with atomic_output(sys.argv[1]) as f:\n"
        "    f.write(b'x' * 4_000_000)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(out)], check=False)
    assert proc.returncode == 128 + signal.SIGTERM
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["a.json"]


def test_an_output_through_a_symbolic_link_replaces_its_target_not_the_link(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_bytes(b"old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_bytes(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "sub" / "made.json")
    write_bytes(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "sub" / "made.json").read_bytes() == b"made"
