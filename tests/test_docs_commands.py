"""The commands the README and the tutorials' "Try it" sections show run as shown, after
``tacit demo`` (with fewer requests), in a new directory: each exits 0.
``tacit serve`` runs until it has started serving (on a free port: the variables ``TACIT_HTTP``
and ``TACIT_GRPC`` apply where the command gives no address), then stops on SIGTERM, cleanly;
``tacit demo --serve`` is left to the test of it (``tests/serve/test_query_api.py``), and
installing completion is not run. The README is at most 150 lines."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
BIN = Path(sys.executable).parent


def shell_blocks(markdown: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", markdown, flags=re.S)


def commands(block: str) -> list[list[str]]:
    """The ``tacit`` commands of a shell block, continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    words = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [w for w in words if w and w[0] == "tacit" and not SETUP & set(w)]


def try_it(markdown: str) -> str:
    """The "Try it" section of a tutorial (to the next heading, or the end)."""
    part = markdown.split("\n## Try it", 1)
    return part[1].split("\n## ", 1)[0] if len(part) == 2 else ""


SETUP = {"--install-completion"}
"""Options of commands shown as setup, not run: installing completion changes the user's shell
start-up files."""


def shown() -> dict[str, list[list[str]]]:
    """Each document's commands, in order (but setup's)."""
    readme = (ROOT / "README.md").read_text()
    found = {"README.md": [c for b in shell_blocks(readme) for c in commands(b)]}
    for tutorial in TUTORIALS:
        blocks = shell_blocks(try_it(tutorial.read_text()))
        found[tutorial.name] = [c for b in blocks for c in commands(b)]
    return found


def test_the_readme_is_short_and_every_tutorial_has_something_to_try():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
    assert len(TUTORIALS) == 5
    for tutorial in TUTORIALS:
        assert commands("".join(shell_blocks(try_it(tutorial.read_text())))), tutorial.name


def test_the_commands_the_docs_show_run(tmp_path):
    """The README's, then each tutorial's, in one directory after the demo; a command shown in
    two places is run once (the tutorials repeat the README's, on the same files)."""
    _run(["tacit", "demo", "--out", "demo-output", "--requests", "30"], tmp_path)
    done: set[tuple[str, ...]] = set()
    for command in (c for cs in shown().values() for c in cs):
        if tuple(command) in done:
            continue
        done.add(tuple(command))
        if command[:2] == ["tacit", "serve"]:
            _serve(command, tmp_path)
        elif command[:2] != ["tacit", "demo"] or "--serve" not in command:
            _run(command, tmp_path)
        # else: tacit demo --serve, which tests/serve/test_query_api.py runs and checks


def _run(command: list[str], where: Path) -> None:
    done = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=where, capture_output=True, text=True,
        timeout=300, env=_env(where),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def _serve(command: list[str], where: Path) -> None:
    proc = subprocess.Popen(
        [str(BIN / command[0]), *command[1:]], cwd=where, stderr=subprocess.PIPE, text=True,
        env=_env(where),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        began = time.monotonic()
        for line in proc.stderr:
            if "serving:" in line or time.monotonic() - began > 120:
                break
        assert "serving:" in line, line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


def _env(where: Path) -> dict[str, str]:
    return os.environ | {
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "TACIT_HTTP": "127.0.0.1:0",
        "TACIT_GRPC": "",
        "TACIT_DATABASE": str(where / "serve.duckdb"),
        "HOME": str(where),  # no command shown may touch the user's own files
    }
