"""``tacit serve`` as roles on one machine, each a process of its own as a deployment runs
them: a NATS server with JetStream (the shared log), a Dask scheduler and two workers, two
ingest replicas, the reconstruct role and a query replica reading its blocks. A simulated
stream of the shop app goes to the replicas in turn, as a load balancer spreads it, with
processes killed (``kill -9``) at set points of the stream; the sender goes on to the other
replica when one does not answer. Then one process (``role: all``) is given the same requests
in the log's order, and the two stores are compared (docs/scale-out.md).

What is reported: the spans ``sent``, ``acknowledged`` and ``stored``; whether the spans
stored, with their parents, scores, probabilities and alternatives, are
``identical_to_single_process``; ``windows_stored_twice``: traces stored more than once; and
whether the query replica counts what was stored.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tacit.errors import ConfigError
from tacit.experiment.capture import stop_process
from tacit.experiment.cpu_quota import cpu_quota
from tacit.experiment.memcached import free_port
from tacit.experiment.nats_server import start_nats
from tacit.experiment.otlp_load import encoded_requests, lost_context
from tacit.experiment.process_cpu import tree_cpu_s
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.simulate import load_app, simulate

KILLS = ("replica", "worker", "reconstruct")
"""What may be killed mid-stream."""
SPAN_COLUMNS = "span_id, parent_span_id, score, probability, alternatives, unmapped, link"
"""What two stores are compared on."""
READY_S = 90.0
SETTLE_S = 180.0
"""How long to wait for a process to be ready, and for the stream to be reconstructed."""
CEILING_POLL_S = 1.0
"""How often :func:`run_ceiling` asks whether the backlog is done: each answer costs the
process a few ms of CPU (it counts the store's rows), a share of a quarter core that polling
more often would distort. The time it took is read from the store instead (the last trace's
``finished_ns``)."""
_SHORT_WINDOWS = "online: {window_s: 1, lookahead_s: 1, max_request_s: 2, lateness_s: 0.1}\n"
"""The service's settings for a stream of seconds: windows short enough that it finishes in
seconds of its end."""


@dataclass
class ScaleOutParams:
    seconds: float = 10.0
    """Length of the simulated stream."""
    rate: float = 100.0
    """Requests per second of the shop app."""
    seed: int = 2
    kill: tuple[str, ...] = ("replica", "worker")
    """What to kill mid-stream (:data:`KILLS`): the first ingest replica at a quarter of the
    stream, a worker at a third, the reconstruct role at half (started again at once)."""
    pause_s: float = 0.05
    """Between two requests sent."""
    lost: bool = False
    """Every call's context lost, as from a thread pool that does not carry it
    (:func:`.otlp_load.lost_context`): each round has every call to infer, as where tacit is
    needed, rather than traces whole on arrival."""
    service_windows: bool = False
    """Reconstruct with the service's own windows, lookahead and lateness, as operators run
    it, instead of the second-long ones that let a test finish in seconds of the stream's end:
    a round's fixed costs (a task, a write) are spread over five times the spans."""


@dataclass
class ScaleOutRun:
    sent: int = 0
    acknowledged: int = 0
    stored: int = 0
    identical_to_single_process: bool = False
    windows_stored_twice: int = 0
    requests: int = 0
    requests_taken: int = 0
    """Requests in the reconstruct role's journal: each once, however often it was sent."""
    query_replica_agrees: bool = False
    """Whether a query replica, reading the blocks, counts what the reconstruct role stored."""
    killed: list[str] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """In a run without kills: CPU seconds (user and system) of each process, by name, and of
    ``one-process``, from when every process was ready (its start-up not counted)."""

    def summary(self) -> dict[str, Any]:
        return asdict(self)


class _Processes:
    """The processes started, each with the command it runs; all stopped on exit."""

    def __init__(self, out: Path, tell: Callable[[str], None]) -> None:
        self.out = out
        self.tell = tell
        self.procs: dict[str, subprocess.Popen] = {}
        self.commands: dict[str, list[str]] = {}

    def start(self, name: str, command: list[str]) -> None:
        self.tell(f"{name}: {' '.join(command)}")
        self.commands[name] = command
        with (self.out / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                command, stdout=log, stderr=log, start_new_session=True
            )

    def adopt(self, name: str, proc: subprocess.Popen) -> None:
        """Count ``proc``, started elsewhere, among the processes."""
        self.procs[name] = proc

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def kill(self, name: str) -> None:
        self.tell(f"kill -9 {name}")
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self, name: str) -> None:
        stop_process(self.procs.pop(name))

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds each process still running has taken, with the processes it started
        that still run (a service's row builder), by name."""
        return {name: own + started for name, (own, started) in self.cpu_split_s().items()}

    def cpu_split_s(self) -> dict[str, tuple[float, float]]:
        """CPU seconds each process still running has taken itself, and those the processes
        it started that still run have taken, by name."""
        return {name: tree_cpu_s(proc.pid) for name, proc in self.procs.items()}

    def __enter__(self) -> _Processes:
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self.procs.values():
            stop_process(proc, signal.SIGKILL)


def run_scale_out(
    out: Path, params: ScaleOutParams | None = None, tell: Callable[[str], None] = print
) -> ScaleOutRun:
    """Run the roles and the stream (module docstring) with everything under ``out``: the
    JetStream store, the stores, each process's log (``NAME.log``)."""
    params = params or ScaleOutParams()
    unknown = set(params.kill) - set(KILLS)
    if unknown:
        raise ConfigError(f"kill: {', '.join(sorted(unknown))} is not one of {', '.join(KILLS)}")
    encoded = _prepare(out, params)
    run = ScaleOutRun(sent=sum(n for n, _ in encoded), requests=len(encoded))
    bin_dir = Path(sys.executable).parent
    nats_port = free_port()
    with _Processes(out, tell) as procs:
        procs.adopt("nats", start_nats(nats_port, out / "jetstream"))
        ports = _start_roles(procs, bin_dir, out, f"nats://127.0.0.1:{nats_port}")
        ready = procs.cpu_s()
        run.acknowledged = _send(procs, encoded, ports, params, run)
        _settle(ports[2], len(encoded))
        run.query_replica_agrees = _status(ports[3])["stored"] == _status(ports[2])["stored"]
        if not run.killed:  # a process started again has no start to count from
            run.cpu_s = {k: v - ready[k] for k, v in procs.cpu_s().items()}
        procs.stop("reconstruct")
    driver_rows, bodies = _read_store(out / "tacit.duckdb")
    run.stored = len({row[0] for row in driver_rows})
    run.requests_taken = len(bodies)
    run.windows_stored_twice = _stored_twice(out / "tacit.duckdb")
    one_rows, one_cpu_s = _one_process(out, bin_dir, bodies, tell)
    if run.cpu_s:
        run.cpu_s["one-process"] = one_cpu_s
    run.identical_to_single_process = driver_rows == one_rows
    return run


def _prepare(out: Path, params: ScaleOutParams) -> list[tuple[int, bytes]]:
    """``out`` cleared, with the call graph and the service's settings in it; the stream's
    requests (span count, body)."""
    _clear(out)
    app = load_app(None)
    learn_callgraph(infer_roles(simulate(app, 5, n_requests=200, seed=1)).spans).save(
        out / "callgraph.yaml"
    )
    windows = "" if params.service_windows else _SHORT_WINDOWS
    (out / "serve.yaml").write_text(f"{windows}idle_s: 2\n")
    spans = simulate(app, params.rate, duration_s=params.seconds, seed=params.seed,
                     record_threads=False)  # fmt: skip
    return encoded_requests(lost_context(spans) if params.lost else spans)


@dataclass
class CeilingRun:
    """How fast one reconstruct process takes a backlog: ``spans`` waiting in the log when
    it starts, the ``wall_s`` and ``cpu_s`` from its start to all stored, on the CPUs
    ``cores`` names (``any``: no pinning) with at most ``quota`` cores of CPU time (None: no
    limit), its rounds on ``dask`` workers or in its own process; ``started_cpu_s``: the part
    of ``cpu_s`` the processes it started took (its row builder, where it has a second
    core)."""

    cores: str
    quota: float | None
    dask: bool
    spans: int
    wall_s: float
    cpu_s: float
    started_cpu_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "cores": self.cores,
            "quota": self.quota,
            "dask": self.dask,
            "spans": self.spans,
            "wall_s": round(self.wall_s, 2),
            "cpu_s": round(self.cpu_s, 2),
            "started_cpu_s": round(self.started_cpu_s, 2),
            "spans_per_s": round(self.spans / self.wall_s),
            "cpu_us_per_span": round(self.cpu_s / self.spans * 1e6, 1),
        }


def run_ceiling(
    out: Path,
    params: ScaleOutParams | None = None,
    cores: str | None = None,
    quota: float | None = None,
    tell: Callable[[str], None] = print,
    dask: bool = False,
) -> CeilingRun:
    """The stream appended to the log by one ingest replica first, then the reconstruct role
    started (writing blocks, as it does for query replicas; on the CPUs ``cores`` names, as
    ``taskset -c`` takes them; None: any; held to ``quota`` cores of CPU time by
    :func:`.cpu_quota`; with ``dask``, its rounds' offline step on a scheduler and two
    workers, unpinned) to take it all: the rate one process reaches when nothing else holds
    it back, to check a rate the cost per span predicts. Timed from the process's start, not
    from its first answer to ``/readyz``: it reads the log before that answer, so that work
    went untimed, and runs timed so were at times faster than the CPU given allows. Its
    start-up is then timed too, the same for any backlog but for noise: a backlog must be
    long enough to outweigh that."""
    params = params or ScaleOutParams()
    encoded = _prepare(out, params)
    bin_dir = Path(sys.executable).parent
    tacit = str(bin_dir / "tacit")
    nats_port, replica_port, port = free_port(), free_port(), free_port()
    nats = f"nats://127.0.0.1:{nats_port}"
    with _Processes(out, tell) as procs:
        procs.adopt("nats", start_nats(nats_port, out / "jetstream"))
        procs.start("replica0", [tacit, "serve", "--role", "ingest", "--grpc", "", "--nats",
                                 nats, "--http", f"127.0.0.1:{replica_port}"])  # fmt: skip
        _wait_ready(replica_port)
        for _, body in encoded:
            if not _post(replica_port, body):
                raise ConfigError("the ingest replica refused a request")
        procs.stop("replica0")
        pinned = ["taskset", "-c", cores] if cores else []
        rounds = ["--dask", _start_dask(procs, bin_dir)] if dask else []
        t0_ns = time.time_ns()
        procs.start("reconstruct", [*pinned, tacit, "serve", "--config", str(out / "serve.yaml"),
                                    "--grpc", "", "--nats", nats, "--role", "reconstruct",
                                    "--http", f"127.0.0.1:{port}", "--callgraph",
                                    str(out / "callgraph.yaml"), "--database",
                                    str(out / "tacit.duckdb"), "--blocks",
                                    str(out / "blocks"), *rounds])  # fmt: skip
        limit = cpu_quota(procs.pid("reconstruct"), quota) if quota else nullcontext()
        with limit:
            _settle(port, len(encoded), poll_s=CEILING_POLL_S)
            own, started = procs.cpu_split_s()["reconstruct"]
        procs.stop("reconstruct")
    wall_s = (_last_stored_ns(out / "tacit.duckdb") - t0_ns) / 1e9
    spans = sum(n for n, _ in encoded)
    return CeilingRun(cores or "any", quota, dask, spans, wall_s, own + started, started)


def _last_stored_ns(path: Path) -> int:
    """When the last trace of a store was stored (the service's wall clock)."""
    import duckdb

    with duckdb.connect(str(path), read_only=True) as db:
        row = db.execute("SELECT max(finished_ns) FROM traces").fetchone()
    assert row is not None and row[0] is not None
    return int(row[0])


def _clear(out: Path) -> None:
    """``out`` made, without what an earlier run left in it: the log's store would hold that
    run's requests, and the stores its spans."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "jetstream", ignore_errors=True)
    shutil.rmtree(out / "blocks", ignore_errors=True)
    for pattern in ("tacit.duckdb*", "one-process.duckdb*", "*.log"):
        for path in out.glob(pattern):
            path.unlink()


def _start_dask(procs: _Processes, bin_dir: Path) -> str:
    """Start a Dask scheduler and two workers of a thread each; the scheduler's address."""
    dask = str(bin_dir / "dask")
    port = free_port()
    scheduler = f"tcp://127.0.0.1:{port}"
    procs.start("scheduler", [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                              "--no-dashboard"])  # fmt: skip
    for w in range(2):
        procs.start(f"worker{w}", [dask, "worker", scheduler, "--nthreads", "1",
                                   "--no-dashboard"])  # fmt: skip
    return scheduler


def _start_roles(procs: _Processes, bin_dir: Path, out: Path, log_url: str) -> list[int]:
    """Start the scheduler, two workers, two replicas and the reconstruct role; the HTTP ports
    of the replicas and of the reconstruct role, once each answers."""
    tacit = str(bin_dir / "tacit")
    scheduler = _start_dask(procs, bin_dir)
    ports = [free_port() for _ in range(3)]
    common = [tacit, "serve", "--config", str(out / "serve.yaml"), "--grpc", "", "--nats", log_url]
    for i in range(2):
        procs.start(f"replica{i}", [*common, "--role", "ingest", "--http",
                                    f"127.0.0.1:{ports[i]}"])  # fmt: skip
    procs.start("reconstruct", [*common, "--role", "reconstruct", "--http",
                                f"127.0.0.1:{ports[2]}", "--dask", scheduler, "--callgraph",
                                str(out / "callgraph.yaml"), "--database",
                                str(out / "tacit.duckdb"), "--blocks",
                                str(out / "blocks")])  # fmt: skip
    for port in ports:
        _wait_ready(port)
    ports.append(free_port())  # blocks are there once the reconstruct role has started
    procs.start("query", [tacit, "serve", "--role", "query", "--grpc", "", "--http",
                          f"127.0.0.1:{ports[3]}", "--blocks", str(out / "blocks")])  # fmt: skip
    _wait_ready(ports[3])
    return ports


def _send(
    procs: _Processes,
    encoded: list[tuple[int, bytes]],
    ports: list[int],
    params: ScaleOutParams,
    run: ScaleOutRun,
) -> int:
    """Send each request to the replicas in turn, one that does not answer passed over, with
    the kills at their points; the spans acknowledged."""
    alive = ports[:2]
    acknowledged = 0
    n = len(encoded)
    kills = {n // 4: ("replica", "replica0"), n // 3: ("worker", "worker0"),
             n // 2: ("reconstruct", "reconstruct")}  # fmt: skip
    for k, (count, body) in enumerate(encoded):
        what, name = kills.get(k, ("", ""))
        if what in params.kill:
            procs.kill(name)
            run.killed.append(name)
            if what == "reconstruct":
                procs.start(name, procs.commands[name])
        for attempt in range(len(alive) * 3):
            port = alive[(k + attempt) % len(alive)]
            if _post(port, body):
                acknowledged += count
                break
            time.sleep(0.2)
        alive = [p for p in alive if _answers(p)] or alive
        time.sleep(params.pause_s)
    return acknowledged


def _post(port: int, body: bytes) -> bool:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
            return True
    except OSError:
        return False


def _wait_ready(port: int) -> None:
    end = time.monotonic() + READY_S
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2):
                return
        except (OSError, urllib.error.HTTPError):
            time.sleep(0.2)
    raise ConfigError(f"nothing ready on port {port} within {READY_S:.0f} s")


def _status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tacit/status", timeout=10) as r:
        return json.loads(r.read())


def _settle(port: int, requests: int, poll_s: float = 0.5) -> None:
    """Wait until the reconstruct role has read every request of the log and reconstructed
    every span it took (looking every ``poll_s``)."""
    _wait_ready(port)
    end = time.monotonic() + SETTLE_S
    while time.monotonic() < end:
        status = _status(port)
        if status["log"]["position"] > requests and status["pending"] == 0:
            return
        time.sleep(poll_s)
    raise ConfigError(f"the stream was not reconstructed within {SETTLE_S:.0f} s")


def _read_store(path: Path) -> tuple[list[tuple], list[tuple[str, bytes]]]:
    """The spans of a store (:data:`SPAN_COLUMNS`, by span id) and its requests in order."""
    import duckdb

    with duckdb.connect(str(path), read_only=True) as db:
        rows = db.execute(f"SELECT {SPAN_COLUMNS} FROM spans ORDER BY span_id").fetchall()
        bodies = db.execute("SELECT encoding, body FROM ingest ORDER BY first_seq").fetchall()
    return rows, [(e, bytes(b)) for e, b in bodies]


def _stored_twice(path: Path) -> int:
    """Traces stored more than once: a span id in two rows, or a trace id in two."""
    import duckdb

    with duckdb.connect(str(path), read_only=True) as db:
        spans = db.execute("SELECT count(*) - count(DISTINCT span_id) FROM spans").fetchone()
        traces = db.execute("SELECT count(*) - count(DISTINCT trace_id) FROM traces").fetchone()
    assert spans is not None and traces is not None
    return int(spans[0]) + int(traces[0])


def _one_process(
    out: Path, bin_dir: Path, bodies: list[tuple[str, bytes]], tell: Callable[[str], None]
) -> tuple[list[tuple], float]:
    """The spans one process (``role: all``) stores when given ``bodies`` in their order, and
    the CPU seconds it took."""
    port = free_port()
    with _Processes(out, tell) as procs:
        procs.start("one-process", [str(bin_dir / "tacit"), "serve", "--config",
                                    str(out / "serve.yaml"), "--grpc", "", "--http",
                                    f"127.0.0.1:{port}", "--callgraph",
                                    str(out / "callgraph.yaml"), "--database",
                                    str(out / "one-process.duckdb")])  # fmt: skip
        _wait_ready(port)
        ready = procs.cpu_s()["one-process"]
        for encoding, body in bodies:
            assert encoding == "protobuf"
            if not _post(port, body):
                raise ConfigError("the one process refused a request the log held")
        end = time.monotonic() + SETTLE_S
        while _status(port)["pending"]:
            if time.monotonic() > end:
                raise ConfigError(f"the one process did not finish within {SETTLE_S:.0f} s")
            time.sleep(0.5)
        cpu_s = procs.cpu_s()["one-process"] - ready
        procs.stop("one-process")
    return _read_store(out / "one-process.duckdb")[0], cpu_s
