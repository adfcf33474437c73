"""``python -m piper show PLAN.json WORKLOAD.json --out plan.png [cluster flags] [--strict]``:
a picture of a plan (:mod:`piper.render.picture`), every number from the one evaluator.

The plan's ``madeFor`` record (:mod:`piper.io.provenance`) is checked against the workload
and the cluster flags: one warning line on stderr per difference, or with ``--strict`` an
error (exit 2). An invalid plan, a bad workload or an unwritable ``--out`` is one line on
stderr and exit status 2. ``--json`` prints one object on stdout: what was drawn.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from piper.cli.common import (
    PICTURE_FORMATS,
    add_cluster_args,
    add_strict_arg,
    check_outputs,
    load_saved_plan,
    load_workload,
)
from piper.core.errors import UsageError
from piper.core.evaluate import Score, evaluate
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.io.jsonfile import lone_surrogate
from piper.render.picture import MAX_PICTURE_DEVICES, PlanPicture, default_time_unit, draw_plan

__all__ = ["add_show_parser", "cmd_show", "write_picture", "picture_summary"]


def add_show_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "show", help="draw a plan into a PNG: devices by node coloured by stage, stage times and memory")
    p.add_argument("plan", help="plan JSON")
    p.add_argument("workload", help="workload JSON")
    p.add_argument("--out", "-o", required=True, metavar="FILE.png",
                   help=f"the picture to write: {', '.join(PICTURE_FORMATS)} (by the extension)")
    add_cluster_args(p)
    add_strict_arg(p, plan=True)
    p.add_argument("--title", help="first title line (default: the workload's name or file name)")
    p.add_argument("--time-unit", metavar="UNIT",
                   help="the workload's time unit for the labels (default: s for model front-end workloads, "
                        "else 'time units')")
    p.add_argument("--json", action="store_true", help="print one JSON object: what was drawn")
    return p


def check_text(*flags: tuple[str, str | None]) -> None:
    """Text drawn into the picture must be Unicode text: an argument of bytes that are not UTF-8
    (Python hands them on as lone surrogates) is a :class:`UsageError` naming the flag."""
    for flag, value in flags:
        if value is None:
            continue
        if lone_surrogate(value) is not None:
            raise UsageError(f"{flag} {value.encode('utf-8', 'backslashreplace').decode()}: not UTF-8 text")


def check_picture_devices(problem: Problem, flag: str) -> None:
    """The picture draws each device (:data:`piper.render.picture.MAX_PICTURE_DEVICES` at most):
    checked before the solve or the drawing, naming the flag."""
    if problem.devices > MAX_PICTURE_DEVICES:
        raise UsageError(f"{flag}: the picture draws each device, and {problem.devices:,} devices (--devices) are more "
                         f"than {MAX_PICTURE_DEVICES:,}")


def write_picture(problem: Problem, plan: Plan, path: str, *, flag: str = "--out", score: Score | None = None,
                  title: str | None = None, time_unit: str | None = None) -> PlanPicture:
    """:func:`piper.render.picture.draw_plan`, with a file that cannot be written as a :class:`UsageError`
    naming the flag (exit 2, one line)."""
    try:
        return draw_plan(problem, plan, path, score=score, title=title,
                         time_unit=time_unit or default_time_unit(problem))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


def picture_summary(picture: PlanPicture) -> dict[str, Any]:
    """The ``show --json`` object (stage numbers 1-based, as in the picture)."""
    used: dict[int, int] = {}
    for st in picture.device_stage:
        if st >= 0:
            used[st] = used.get(st, 0) + 1
    return {
        "png": picture.path,
        "stages": picture.stages,
        "devices_per_stage": [used.get(i, 0) for i in range(picture.stages)],
        "unused_devices": sum(1 for st in picture.device_stage if st < 0),
        "devices_per_node": picture.node_size,
        "nodes": len(picture.node_boundaries) + 1,
        "bottleneck_stage": None if picture.bottleneck is None else picture.bottleneck + 1,
        "labelled_stages": [i + 1 for i in picture.labelled_stages],
        "straddling_stages": [i + 1 for i in picture.straddling],
        "oom_stages": [i + 1 for i in picture.oom_stages],
    }


def cmd_show(args: argparse.Namespace, prog: str = "piper") -> int:
    check_outputs([("--out", args.out)], [("the plan", args.plan), ("the workload", args.workload)],
                  formats={"--out": PICTURE_FORMATS})
    check_text(("--title", args.title), ("--time-unit", args.time_unit))
    problem = load_workload(args.workload, args, prog)
    check_picture_devices(problem, "--out")
    plan = load_saved_plan(args.plan, problem, strict=bool(args.strict), prog=prog)
    score = evaluate(problem, plan)
    title = args.title or str(problem.extra.get("name") or Path(args.workload).name)
    picture = write_picture(problem, plan, args.out, score=score, title=title, time_unit=args.time_unit)
    summary = picture_summary(picture)
    if args.json:
        print(json.dumps(summary))
        return 0
    extra = ""
    if summary["straddling_stages"]:
        listed = ", ".join(str(i) for i in summary["straddling_stages"])
        extra = f"; stage(s) {listed} fit in a node but could not be placed inside one"
    print(f"wrote {args.out}: {summary['stages']} stages on {score.devices_used} of {problem.devices} devices, "
          f"bottleneck stage {summary['bottleneck_stage']}{extra}")
    return 0
