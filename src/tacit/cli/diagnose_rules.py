"""``tacit diagnose`` commands: ``rules`` (root-cause rules on problem features) and ``tcp``
(client / Internet path split from ``ss -tin`` output)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from tacit.cli.common import FRACTION, JsonOpt, out, print_json
from tacit.errors import InputError

RulesOpt = Annotated[
    Path | None, typer.Option("--rules", help="Rule file (default: the packaged default.rules).")
]

RPC_COLUMNS = ("local", "peer", "start_s", "first_byte_ms", "server_ms")
MAX_MS = 1e12
"""The longest delay an RPC row may give (about 31 years): its nanoseconds fit in int64."""
"""Required columns of the ``--rpcs`` CSV; any other column is a feature for the rules."""


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``diagnose`` group."""
    app.command("rules")(rules_cmd)
    app.command("tcp")(tcp_cmd)


def rules_cmd(
    features: Annotated[
        list[Path], typer.Argument(help="JSON-lines files: one object of features per problem.")
    ],
    rules: RulesOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Evaluate root-cause rules (YTrace's SYMPTOM / PATHOLOGY / PROCEDURE language)."""
    from tacit.diagnosis.rules import read_rules
    from tacit.formats.textio import iter_json_lines

    ruleset = read_rules(rules)
    ids, problems = [], []
    for path in features:
        for lineno, obj in iter_json_lines(path):
            if not isinstance(obj, dict):
                raise InputError("expected an object of features", path=str(path), record=lineno)
            ids.append(str(obj.get("id", f"{path.name}:{lineno}")))
            problems.append(obj)
    verdicts = [ruleset.evaluate(f, problem=i) for i, f in zip(ids, problems, strict=True)]
    _report(ruleset, ids, verdicts, json_out, {"problems": len(problems)})


def tcp_cmd(
    ss_output: Annotated[Path, typer.Argument(help="ss -tin output (snapshots, timestamped).")],
    rpcs: Annotated[
        Path,
        typer.Option(
            "--rpcs",
            help="CSV of RPCs: local, peer (the server's connection as ss prints it), start_s "
            "(Unix seconds), first_byte_ms, server_ms; other columns are features (e.g. slow).",
        ),
    ],
    rules: RulesOpt = None,
    network_share: Annotated[
        float,
        typer.Option(callback=FRACTION, help="Network-bound above this share of network + server."),
    ] = 0.5,
    json_out: JsonOpt = False,
) -> None:
    """Split RPCs into server-, network- and client-bound and explain them with the rules."""
    from tacit.diagnosis.rules import read_rules
    from tacit.diagnosis.tcpinfo import PathSplitParams, rpc_tcp_stats, split_rpcs
    from tacit.formats.ss import MS, read_ss

    ruleset = read_rules(rules)
    ss = read_ss(ss_output)
    rows, extra = _read_rpcs(rpcs)
    ms = np.array([[r["first_byte_ms"], r["server_ms"]] for r in rows], dtype=float)
    ms = ms.reshape(-1, 2)
    start = np.array([r["start_s"] for r in rows], dtype=np.int64)
    first_byte = np.round(ms[:, 0] * MS).astype(np.int64)
    stats = rpc_tcp_stats(
        ss.table, [f"{r['local']} {r['peer']}" for r in rows], start, start + first_byte
    )
    split = split_rpcs(
        first_byte,
        np.round(ms[:, 1] * MS).astype(np.int64),
        stats,
        PathSplitParams(network_share=network_share),
    )
    ids = [str(r.get("id") or f"{rpcs.name}:{i + 2}") for i, r in enumerate(rows)]
    verdicts = []
    for i, r in enumerate(rows):
        feats = {**split.features(i), **{k: r[k] for k in extra}}
        verdicts.append(ruleset.evaluate(feats, problem=ids[i]))
    bounds = split.bound_names()
    summary = {"rpcs": len(rows), "bounds": split.counts(), "ss": ss.accounting}
    per_rpc = [{"bound": bounds[i], **split.features(i)} for i in range(len(rows))]
    _report(ruleset, ids, verdicts, json_out, summary, per_rpc)


def _read_rpcs(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The RPC rows (times as ns / floats) and the names of the extra feature columns."""
    from tacit.formats.socketevents import seconds_to_ns
    from tacit.formats.textio import csv_rows

    rows = csv_rows(path)
    header = next(rows, (0, []))[1]
    missing = [c for c in RPC_COLUMNS if c not in header]
    if missing:
        raise InputError(f"missing CSV column(s): {', '.join(missing)}", path=str(path))
    extra = [c for c in header if c not in (*RPC_COLUMNS, "id")]
    out = []
    for lineno, cells in rows:
        if not cells:
            continue
        if len(cells) != len(header):
            raise InputError(
                f"{len(cells)} fields, the header has {len(header)}",
                path=str(path),
                record=f"line {lineno}",
            )
        raw = dict(zip(header, cells, strict=True))
        try:
            row: dict[str, Any] = dict(raw)
            row["start_s"] = seconds_to_ns(raw["start_s"])
            for k in ("first_byte_ms", "server_ms"):
                row[k] = float(raw[k])
                if not 0 <= row[k] < MAX_MS:  # NaN fails too
                    raise ValueError(f"{k} must be a number of ms from 0 to 10^12, got {raw[k]!r}")
            for k in extra:
                row[k] = _feature(raw[k])
        except (ValueError, TypeError) as e:
            raise InputError(f"bad value: {e}", path=str(path), record=f"line {lineno}") from None
        out.append(row)
    return out, extra


def _feature(text: str | None) -> bool | float | str | None:
    """A CSV cell as a feature: true/false, a number, empty (missing), or the text."""
    t = (text or "").strip()
    if not t:
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    try:
        return float(t)
    except ValueError:
        return t


def _report(
    ruleset: Any,
    ids: list[str],
    verdicts: list[Any],
    json_out: bool,
    summary: dict[str, Any],
    details: list[dict[str, Any]] | None = None,
) -> None:
    holds = Counter(p for v in verdicts for p in v.holds)
    undetermined = Counter(p for v in verdicts for p in v.undetermined)
    if json_out:
        problems = [
            {"id": i, **v.as_dict(), **({"path": details[k]} if details else {})}
            for k, (i, v) in enumerate(zip(ids, verdicts, strict=True))
        ]
        print_json(
            {
                **summary,
                "rules": ruleset.path,
                "pathologies": {p: holds[p] for p in ruleset.pathologies},
                "undetermined": {p: undetermined[p] for p in ruleset.pathologies},
                "results": problems,
            }
        )
        return
    t = Table(title=f"{len(verdicts)} problems, rules {ruleset.path}")
    for col in ("pathology", "holds", "undetermined"):
        t.add_column(col, justify="left" if col == "pathology" else "right")
    for p in ruleset.pathologies:
        t.add_row(p, str(holds[p]), str(undetermined[p]))
    out.print(t)
    if "bounds" in summary:
        out.print("bounds: " + ", ".join(f"{k} {v}" for k, v in summary["bounds"].items()))
