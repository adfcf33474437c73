"""The outputs of ``experiments.compare``: the table and summary on stdout, report.json and
report.csv (rewritten atomically after every instance), and the failed instances as
workload files under ``OUT/failed/``."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from experiments.compare.cross_checks import InstanceReport
from experiments.compare.solve import KILLED, NOT_RUN, SKIPPED, UNAVAILABLE, SolverRun
from experiments.lib.suites import Instance, problem_name
from piper.core.result import Status
from piper.io.workload import dump_problem

__all__ = ["CSV_FIELDS", "RUN_FILES", "run_row", "instance_dict", "render_table", "summarize", "render_summary",
           "atomic_write", "write_reports", "write_failed", "clear_outputs"]


CSV_FIELDS = [
    "instance", "suite", "layers", "edges", "k", "N", "solver", "exact", "status", "limit", "early", "tps",
    "objective_kind", "value", "reported_tps", "objective",
    "bound", "tolerance", "gap", "gap_vs", "time_s", "solver_time_s", "warmup_s", "devices_used", "check", "message",
]  # fmt: skip


def _num(x: float | None) -> float | str | None:
    """JSON/CSV-safe number: inf -> "inf"."""
    if x is None:
        return None
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def run_row(report: InstanceReport, run: SolverRun) -> dict[str, Any]:
    return {
        "instance": report.name,
        "suite": report.suite,
        "layers": report.layers,
        "edges": report.edges,
        "k": report.devices,
        "N": report.microbatches,
        "solver": run.solver,
        "exact": run.exact,
        "status": run.status,
        "limit": run.limit,
        "early": run.early,
        "tps": _num(run.tps) if run.status not in NOT_RUN else None,
        "objective_kind": run.objective_kind,
        "value": _num(run.value) if run.status not in NOT_RUN else None,
        "reported_tps": _num(run.reported_tps),
        "objective": _num(run.objective),
        "bound": _num(run.bound),
        "tolerance": run.tolerance,
        "gap": _num(run.gap),
        "gap_vs": None if run.gap is None else ("optimum" if run.gap_vs_proof else "best"),
        "time_s": run.time_s,
        "solver_time_s": run.solver_time_s,
        "warmup_s": run.warmup_s,
        "devices_used": run.devices_used,
        "check": "FAIL" if run.failures else "ok",
        "message": "; ".join([*run.failures, run.message] if run.message else run.failures),
    }


def instance_dict(report: InstanceReport) -> dict[str, Any]:
    return {
        "name": report.name,
        "suite": report.suite,
        "note": report.note,
        "layers": report.layers,
        "edges": report.edges,
        "k": report.devices,
        "N": report.microbatches,
        "memory": report.memory,
        "verdict": report.verdict,
        "optimum": _num(report.optimum),
        "best": _num(report.best),
        "best_by": report.best_by,
        "failures": [asdict(f) for f in report.failures],
        "wall_s": report.wall_s,
    }


def _fmt_tps(run: SolverRun) -> str:
    if run.status in NOT_RUN:
        return "-"
    if not run.has_plan:
        return "inf" if run.status == Status.INFEASIBLE.value else "-"
    return f"{run.value:.6g}" if math.isfinite(run.value) else "OOM"


def _fmt_gap(run: SolverRun) -> str:
    if run.gap is None:
        return ""
    mark = "" if run.gap_vs_proof else "~"
    if math.isinf(run.gap):
        return f"{mark}inf"
    return f"{mark}{100 * run.gap:+.2f}%" if abs(run.gap) > 1e-12 else f"{mark}0"


def _fmt_time(seconds: float) -> str:
    return f"{1000 * seconds:.1f}ms" if seconds < 0.1 else f"{seconds:.2f}s"


def _fmt_status(run: SolverRun) -> str:
    if run.limit:
        return f"{run.status} (limit)"
    if run.early:
        return f"{run.status} (early)"
    return run.status


def _fmt_note(run: SolverRun) -> str:
    if run.failures:
        return "FAIL " + run.failures[0]
    if run.limit and run.bound is not None:
        return f"bound {run.bound:.6g}"
    if run.early:
        return f"no proof, stopped before the time limit: {run.message or 'no reason given'}"
    if run.status in (SKIPPED, UNAVAILABLE, KILLED):
        return run.message
    return ""


def render_table(reports: Sequence[InstanceReport], note_width: int = 70) -> str:
    header = ["instance", "layers", "k", "solver", "status", "TPS / batch", "gap", "time", "note"]
    rows = [header]
    for rep in reports:
        for run in rep.runs:
            note = _fmt_note(run)
            if len(note) > note_width:
                note = note[: note_width - 3] + "..."
            rows.append(
                [rep.name, str(rep.layers), str(rep.devices), run.solver, _fmt_status(run), _fmt_tps(run),
                 _fmt_gap(run), _fmt_time(run.time_s), note]  # fmt: skip
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    right = {1, 2, 5, 6, 7}
    lines = []
    for j, r in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(lines)


def summarize(reports: Sequence[InstanceReport]) -> dict[str, Any]:
    verdicts: dict[str, int] = {}
    for rep in reports:
        verdicts[rep.verdict] = verdicts.get(rep.verdict, 0) + 1
    infeasible = sum(1 for r in reports if r.optimum is not None and math.isinf(r.optimum))
    per_solver: dict[str, dict[str, Any]] = {}
    for rep in reports:
        for run in rep.runs:
            s = per_solver.setdefault(
                run.solver,
                {"exact": run.exact, "runs": 0, "statuses": {}, "limit": 0, "early": 0, "failed": 0, "time_s": 0.0,
                 "gaps": []},  # fmt: skip
            )
            s["runs"] += 1
            s["statuses"][run.status] = s["statuses"].get(run.status, 0) + 1
            s["limit"] += run.limit
            s["early"] += run.early
            s["failed"] += bool(run.failures)
            s["time_s"] += run.time_s
            if run.gap is not None and run.gap_vs_proof and rep.optimum is not None and math.isfinite(rep.optimum):
                s["gaps"].append(run.gap)
    for s in per_solver.values():
        gaps = s.pop("gaps")
        finite = [g for g in gaps if math.isfinite(g)]
        s["gap"] = {
            "instances": len(gaps),
            "optimal": sum(1 for g in gaps if abs(g) <= 1e-9),
            "no_plan": len(gaps) - len(finite),
            "mean": sum(finite) / len(finite) if finite else None,
            "max": max(finite) if finite else None,
        }
    return {
        "instances": len(reports),
        "verdicts": verdicts,
        "proven_infeasible": infeasible,
        "failed_instances": [r.name for r in reports if not r.ok],
        "failures": [str(f) for r in reports for f in r.failures],
        "solvers": per_solver,
    }


def render_summary(summary: dict[str, Any], wall_s: float | None = None, max_failures: int = 20) -> str:
    v = summary["verdicts"]
    lines = [
        f"instances: {summary['instances']} (proven infeasible: {summary['proven_infeasible']})",
        "exact solvers: "
        f"{v.get('agree', 0)} instances with >= 2 proofs, all agreeing; {v.get('single', 0)} with one proof; "
        f"{v.get('unproven', 0)} unproven; {v.get('FAIL', 0)} with failed checks",
    ]
    for name, s in summary["solvers"].items():
        statuses = ", ".join(f"{k} {n}" for k, n in sorted(s["statuses"].items()))
        line = f"  {name:<11} {'exact' if s['exact'] else 'heur.'}  {statuses}; {s['time_s']:.1f}s total"
        if s["limit"]:
            line += f"; hit the time limit {s['limit']}x"
        if s["early"]:
            line += f"; stopped early without a proof {s['early']}x"
        g = s["gap"]
        if not s["exact"] and g["instances"]:
            mean = "-" if g["mean"] is None else f"{100 * g['mean']:+.2f}%"
            worst = "-" if g["max"] is None else f"{100 * g['max']:+.2f}%"
            line += f"; gap vs optimum on {g['instances']}: {g['optimal']} optimal, mean {mean}, max {worst}"
            if g["no_plan"]:
                line += f", no plan on {g['no_plan']}"
        if s["failed"]:
            line += f"; FAILED {s['failed']}"
        lines.append(line)
    shown = summary["failures"][:max_failures]
    lines += [f"FAIL {f}" for f in shown]
    if len(summary["failures"]) > len(shown):
        lines.append(f"... and {len(summary['failures']) - len(shown)} more failures (see the JSON report)")
    if wall_s is not None:
        lines.append(f"wall time: {wall_s:.1f}s")
    return "\n".join(lines)


#: what a run writes into ``--out`` (besides ``failed/*.json``): cleared when a run starts
#: (:func:`clear_outputs`), so a reused directory never shows a previous run's files
RUN_FILES = ("report.json", "report.csv", "times.png", "gaps.png")


def _file_mode() -> int:
    """0666 less the process umask (what ``open(path, "w")`` gives: 0644 under umask 022)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same directory and os.replace; the file gets the
    mode any file the user writes gets (0644 under umask 022), not mkstemp's 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _csv_text(reports: Sequence[InstanceReport]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for rep in reports:
        for run in rep.runs:
            writer.writerow({k: ("" if v is None else v) for k, v in run_row(rep, run).items()})
    return buf.getvalue()


def write_reports(out: Path, reports: Sequence[InstanceReport], meta: dict[str, Any]) -> None:
    """report.json (meta, summary, instances, one row per (instance, solver) with its
    plan) and report.csv (the rows), both atomically."""
    rows = []
    for rep in reports:
        for run in rep.runs:
            rows.append({**run_row(rep, run), "plan": run.plan})
    doc = {"meta": meta, "summary": summarize(reports), "instances": [instance_dict(r) for r in reports], "rows": rows}
    atomic_write(out / "report.json", json.dumps(doc, indent=1) + "\n")
    atomic_write(out / "report.csv", _csv_text(reports))


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "instance"


def write_failed(out: Path, reports: Sequence[InstanceReport], instances: dict[str, Instance]) -> list[Path]:
    """Each instance with a failed check, as a workload JSON under OUT/failed/."""
    paths = []
    for rep in reports:
        if rep.ok or rep.name not in instances:
            continue
        problem = instances[rep.name].problem
        if problem_name(problem, "") != rep.name:
            problem = replace(problem, extra={**problem.extra, "name": rep.name})
        path = out / "failed" / f"{_safe_name(rep.name)}.json"
        atomic_write(path, dump_problem(problem) + "\n")
        paths.append(path)
    return paths


def clear_outputs(out: Path, keep: Sequence[str | Path] = ()) -> list[Path]:
    """Remove what an earlier run wrote into ``out`` (:data:`RUN_FILES` and ``failed/*.json``),
    except the files in ``keep`` (this run's inputs, e.g. a re-run of ``failed/NAME.json``);
    other files are left alone. Returns the paths removed."""
    kept = {os.path.realpath(p) for p in keep}
    old = [out / name for name in RUN_FILES]
    failed = out / "failed"
    if failed.is_dir():
        old += sorted(failed.glob("*.json"))
    removed = []
    for path in old:
        if path.is_file() and os.path.realpath(path) not in kept:
            path.unlink()
            removed.append(path)
    if failed.is_dir() and not any(failed.iterdir()):
        failed.rmdir()
    return removed
