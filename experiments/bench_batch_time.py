"""Speed and memory of Piper's DP with the batch-time objective (issue 29) on model front-end
workloads, 1F1B and interleaved.

    python -m experiments.bench_batch_time [--cases llama3-70b,llama3-405b] [--modes uniform,free,interleaved,any]
        [--max-virtual-stages 8] [--time-limit SECONDS] [--out DIR] [--json] [--quiet]

Cases (the model front end, ``piper.frontend``; sequence 8192, micro-batch 1, H100 SXM 80 GB,
8 per node):

* ``llama3-70b``: 128 nodes (1,024 GPUs), global batch 1,024 (N = 1,024);
* ``llama3-405b``: 2,048 nodes (16,384 GPUs), global batch 2,048 (N = 2,048);
* ``llama3-8b``: 2 nodes (16 GPUs), global batch 64: a quick case.

Modes (all ``--objective batch-time``):

* ``uniform``: 1F1B, every stage one (d, t) (``--uniform``);
* ``free``: 1F1B, free (d, t) per stage;
* ``interleaved``: interleaved plans only, v = 2 .. ``--max-virtual-stages``;
* ``any``: the best of free 1F1B and interleaved plans.

Every (case, mode) runs in its own subprocess, so its peak memory (``ru_maxrss`` of the child)
is its own. The child builds the workload, solves it twice and reports both wall times: the
first solve loads the DP's compiled kernels from numba's cache (compiling, if the cache is
cold, is not timed: ``stats["compile_s"]``), the second is what each further solve of a process
costs (the ``plan`` search solves one workload per micro-batch size). Also per row: the CPU time
of the second solve (on a shared machine the fairer figure), the child's whole-process wall
time, the status, the batch time and the plan's schedule. The machine is shared: times are
noisy; the load average and the revision are printed with the table.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import flags
from experiments.lib.revision import revision
from piper.cli.common import positive_int, run_main

PROG = "python -m experiments.bench_batch_time"
ROOT = Path(__file__).resolve().parent.parent

#: case -> (preset, nodes of 8 H100, global batch)
CASES = {"llama3-8b": ("llama3-8b", 2, 64), "llama3-70b": ("llama3-70b", 128, 1024),
         "llama3-405b": ("llama3-405b", 2048, 2048)}
MODES = ("uniform", "free", "interleaved", "any")


def workload(case: str):
    """The case's Problem (piper.frontend.build_workload)."""
    from piper import problem_from_dict
    from piper.frontend.hardware import hardware
    from piper.frontend.presets import preset
    from piper.frontend.workload import TrainingSetup, build_workload

    name, nodes, batch = CASES[case]
    return problem_from_dict(build_workload(preset(name), hardware("h100-sxm-80gb"),
                                            TrainingSetup(nodes=nodes, global_batch=batch)))


def options_of(mode: str, max_v: int, time_limit: float | None):
    from piper import Options

    base = {"objective": "batch-time", "time_limit_s": time_limit}
    if mode == "uniform":
        return Options(uniform=True, **base)
    if mode == "free":
        return Options(**base)
    if mode == "interleaved":
        return Options(schedule="interleaved", max_virtual_stages=max_v, **base)
    return Options(max_virtual_stages=max_v, **base)


def child(case: str, mode: str, max_v: int, time_limit: float | None) -> dict[str, Any]:
    """One (case, mode) in this process (the child of :func:`run_case`)."""
    from piper import solve

    start = time.perf_counter()
    problem = workload(case)
    options = options_of(mode, max_v, time_limit)
    t0 = time.perf_counter()
    first = solve(problem, options, solver="dp")
    first_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    res = solve(problem, options, solver="dp")
    warm_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    plan = res.plan
    return {"case": case, "mode": mode, "status": res.status.value, "batch_time": res.batch_time, "tps": res.tps,
            "bound": res.bound, "schedule": None if plan is None else plan.schedule.label(),
            "groups": None if plan is None else plan.groups,
            "stages": None if plan is None else len(plan.stages),
            "first_s": first_s, "warm_s": warm_s, "cpu_s": cpu_s, "compile_s": first.stats.get("compile_s", 0.0),
            "process_s": time.perf_counter() - start,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "message": res.message}


def run_case(case: str, mode: str, max_v: int, time_limit: float | None) -> dict[str, Any]:
    code = ("import json, sys; from experiments.bench_batch_time import child; "
            f"print(json.dumps(child({case!r}, {mode!r}, {max_v}, {time_limit!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"case": case, "mode": mode, "status": "error", "message": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def warm_up() -> None:
    """Compile (or load) the kernels once, untimed, so that no child compiles."""
    code = ("from experiments.bench_batch_time import child; child('llama3-8b', 'any', 4, None); "
            "child('llama3-8b', 'uniform', 2, None)")
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def table(rows: list[dict[str, Any]]) -> str:
    head = ("case", "mode", "status", "batch time", "schedule", "first s", "warm s", "CPU s", "process s", "peak MB")
    lines = []
    for r in rows:
        if r["status"] == "error":
            lines.append((r["case"], r["mode"], "error", str(r["message"]), "", "", "", "", "", ""))
            continue
        sched = r["schedule"] or "-"
        if r["schedule"]:
            sched += f", {r['groups']} groups" if r["schedule"] != "1f1b" else f", {r['stages']} stages"
        lines.append((r["case"], r["mode"], r["status"], f"{r['batch_time']:.6g}", sched, f"{r['first_s']:.2f}",
                      f"{r['warm_s']:.2f}", f"{r['cpu_s']:.2f}", f"{r['process_s']:.1f}", f"{r['peak_mb']:.0f}"))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*ln) for ln in lines)])


def main(argv: Sequence[str] | None = None) -> int:
    ap = flags.make_parser(PROG, __doc__)
    ap.add_argument("--cases", type=flags.name_list(CASES), default=["llama3-70b", "llama3-405b"],
                    help=f"comma-separated cases (default llama3-70b,llama3-405b; known: {', '.join(CASES)})")
    ap.add_argument("--modes", type=flags.name_list(MODES), default=list(MODES),
                    help=f"comma-separated modes (default all: {', '.join(MODES)})")
    ap.add_argument("--max-virtual-stages", type=positive_int, default=8, metavar="V",
                    help="most chunks per device group of interleaved plans (default 8)")
    flags.add_time_limit(ap, None)
    flags.add_out(ap, "out/bench_batch_time", "bench_batch_time.json")
    flags.add_quiet(ap)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    out = flags.out_dir(args.out)
    say = flags.progress(args.quiet)
    say("warming up (loading or compiling the DP's kernels)")
    warm_up()
    rows = []
    for case in args.cases:
        for mode in args.modes:
            say(f"{case} {mode}")
            rows.append(run_case(case, mode, args.max_virtual_stages, args.time_limit))
    doc = {"revision": revision(), "load_average": os.getloadavg(), "cpus": os.cpu_count(), "rows": rows}
    (out / "bench_batch_time.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    if args.json:
        print(json.dumps(doc, default=str))
    else:
        print(table(rows))
        print(f"revision {doc['revision']}; load average {', '.join(f'{x:.1f}' for x in doc['load_average'])} "
              f"on {doc['cpus']} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, prog=PROG))
