"""Shell completion, as bash asks for it of the installed command (what ``tacit
--install-completion`` sets up): commands and options complete."""

from __future__ import annotations

import os
import subprocess

from clirun import TACIT


def _complete(words: str) -> list[str]:
    env = {
        **os.environ,
        "_TACIT_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    done = subprocess.run([str(TACIT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_commands_and_options_complete():
    assert _complete("tacit ser") == ["serve"]
    assert _complete("tacit serve --log") == ["--log-level"]
    assert _complete("tacit serve --nat") == ["--nats"]
    assert "link" in _complete("tacit paths l")
