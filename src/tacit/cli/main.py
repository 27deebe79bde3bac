"""The ``tacit`` command line: one typer app, one module per command group.

Every :class:`~tacit.errors.TacitError` becomes one line on stderr and exit code 2; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import signal
import sys
from importlib.metadata import version
from typing import Annotated

import typer

from tacit.cli import capture, diagnose, experiment, latency, paths, serve, traces
from tacit.cli.common import (
    as_given,
    console,
    out,
    refuse_existing_outputs,
    show_notices,
    standard_streams,
)
from tacit.errors import TacitError
from tacit.extras import DISTRIBUTION
from tacit.kernel_cache import kernels_cached

app = typer.Typer(
    name="tacit",
    help="Observability without instrumentation: traces and latencies inferred from what is "
    "visible anyway. Before or after any command: --tsv prints every table as tab-separated "
    "values (for pipes), --quiet leaves out progress and notices, --force replaces output "
    "files that exist, --debug shows the traceback of an error.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


def _version(given: bool) -> None:
    if given:
        print(f"tacit {version(DISTRIBUTION)}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


traces.register(app)
capture.register(app)
paths.register(app)
latency.register(app)
experiment.register(app)
diagnose.register(app)
serve.register(app)


def terminate(signum: int, _frame: object) -> None:
    """SIGTERM ends the command as an exception would, so that an output being written is
    removed (:func:`tacit.outputs.atomic_output`) and the previous file stays as it was."""
    raise SystemExit(128 + signum)


def _take_flag(name: str) -> bool:
    """Whether the global flag ``name`` was given, before or after the command; it is taken out
    of ``sys.argv`` so that the command does not see it."""
    if name not in sys.argv:
        return False
    sys.argv.remove(name)
    return True


def main() -> None:
    """Entry point: run the app, turning tacit's errors into one line and exit code 2.

    Usage errors are typer's own (exit code 2 with the usage text).
    """
    debug = _take_flag("--debug")
    out.tsv = _take_flag("--tsv")  # every table as tab-separated values, for pipes
    show_notices(_take_flag("--quiet"))
    out.force = force = _take_flag("--force")
    signal.signal(signal.SIGTERM, terminate)
    if sys.stderr.isatty() and not kernels_cached():
        console.print("first run: compiling tacit's kernels (once; later runs reuse them)")
    try:
        refuse_existing_outputs(sys.argv, force)
        with standard_streams(sys.argv) as sys.argv:
            app()
    except (TacitError, OSError, MemoryError) as e:
        # An OSError tacit did not turn into one of its own errors still names its file; a
        # MemoryError is an allocation the machine refused (numpy says how large).
        if debug:
            raise
        what = f"out of memory: {e or 'an allocation failed'}" if isinstance(e, MemoryError) else e
        print(f"tacit: error: {as_given(what)}", file=sys.stderr)
        sys.exit(2)
