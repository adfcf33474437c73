"""The overhead of the Ray backend against the local one (issue 23), on this machine.

    python -m experiments.bench_backends [--instances 200] [--jobs 2] [--time-limit 10]
        [--solvers dp,brute,cpsat] [--split-solver cpsat] [--repeat R] [--skip split|compare] [--out DIR] [--quiet]

Two measurements, each run once on the local backend and once on a local Ray instance
started for it (``ray.init`` with ``--jobs`` CPUs), one after the other:

* ``split``: the split proof (``params["split"] = "sequences"``) of
  ``experiments.lib.instances.bench_instance(24, "branchy", 8)`` (292 option sequences) below the
  DP's plan, with ``--split-solver``: ``--jobs`` subproblems at once on threads
  (``split_workers``), against the same sequences as Ray tasks
  (``params["split_backend"] = "ray"``). The DP's plan is computed once, first.
* ``compare``: ``python -m experiments.compare --suite random:INSTANCES --solvers SOLVERS
  --jobs JOBS --time-limit T`` against the same with ``--backend ray``.

Each run is a separate process; with ``--repeat R`` each backend runs R times, the order
alternating, and the medians are compared (a shared machine's load moves single runs by
tens of percent). An untimed compare of 2 instances comes first, so that
numba's on-disk cache of the DP is filled for both backends alike. The ratio is Ray's wall time over the local one: of the
work itself (the solve, or compare's run as its report says), and of the whole process
(Ray's start included). Both runs must agree (same optimum and status; compare: the same
optimum and verdict for every instance), else the exit status is 1. Prints a table on
stdout (``--json``: one JSON object instead) and writes ``DIR/bench_backends.json``.
Needs Ray (``pip install -e ".[ray]"``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import flags
from experiments.lib.revision import revision
from piper.cli.common import ArgumentParser, positive_int, run_main

PROG = "python -m experiments.bench_backends"
ROOT = Path(__file__).resolve().parent.parent

#: the split benchmark's instance: experiments.lib.instances.bench_instance(*SPLIT_INSTANCE)
SPLIT_INSTANCE = (24, "branchy", 8)


def split_child(backend: str, solver: str, jobs: int, plan_file: str) -> dict[str, Any]:
    """One split proof in this process (the child of :func:`split_run`)."""
    from experiments.lib.instances import bench_instance
    from piper import Options
    from piper.io.plans import load_plan
    from piper.solvers.registry import get_solver

    problem = bench_instance(*SPLIT_INSTANCE)
    params: dict[str, Any] = {"split": "sequences", "split_workers": jobs}
    ray_start = 0.0
    if backend == "ray":
        from piper.solvers.execution import init_ray

        t0 = time.perf_counter()
        init_ray(None, num_cpus=jobs)
        ray_start = time.perf_counter() - t0
        params["split_backend"] = "ray"
    options = Options(threads=jobs, warm_start=load_plan(plan_file), params=params)
    func = get_solver(solver).load()  # the solver function itself: split_backend is checked there
    t0 = time.perf_counter()
    res = func(problem, options)
    return {"status": res.status.value, "tps": res.tps, "work_s": time.perf_counter() - t0, "ray_start_s": ray_start,
            "split": res.stats.get("split")}


def _run_json(args: list[str], quiet: bool) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} ... exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    if not quiet:
        sys.stderr.write(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def _pairs(what: str, run: Callable[[str], dict[str, Any]], repeat: int, say: Any) -> dict[str, Any]:
    """``run(backend)`` ``repeat`` times per backend, the order alternating (local first,
    then Ray first, ...); medians, the ratio of the medians and each pair's ratio. Every
    run must give the same ``answer``."""
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
    for i in range(repeat):
        for backend in ("local", "ray") if i % 2 == 0 else ("ray", "local"):
            say(f"{what}: {backend} ({i + 1}/{repeat})")
            runs[backend].append(run(backend))
    answers = {json.dumps(r["answer"], sort_keys=True, default=str) for rs in runs.values() for r in rs}
    med = {b: {k: statistics.median(r[k] for r in rs) for k in ("work_s", "process_s")} for b, rs in runs.items()}
    return {"what": what, "runs": runs, "median": med, "same": len(answers) == 1,
            "ratio_work": med["ray"]["work_s"] / med["local"]["work_s"],
            "ratio_process": med["ray"]["process_s"] / med["local"]["process_s"],
            "pair_ratios_work": [r["work_s"] / l_["work_s"] for l_, r in zip(runs["local"], runs["ray"])]}


def split_bench(solver: str, jobs: int, repeat: int, out: Path, say: Any, quiet: bool) -> dict[str, Any]:
    from experiments.lib.instances import bench_instance
    from piper import Options, solve

    problem = bench_instance(*SPLIT_INSTANCE)
    say(f"split: the DP's plan of instance{SPLIT_INSTANCE} (once, not compared)")
    dp = solve(problem, Options(), solver="dp")
    plan_file = out / "split_dp_plan.json"
    plan_file.write_text(json.dumps(dp.plan.to_dict()) + "\n")

    def run(backend: str) -> dict[str, Any]:
        code = (f"import json, sys; from experiments.bench_backends import split_child; "
                f"print(json.dumps(split_child({backend!r}, {solver!r}, {jobs}, {str(plan_file)!r})))")
        res, process_s = _run_json(["-c", code], quiet)
        return {**res, "process_s": process_s, "answer": [res["status"], res["tps"]]}

    out_ = _pairs(f"split proof {solver}, instance{SPLIT_INSTANCE}, {jobs} at once", run, repeat, say)
    out_["dp_tps"] = dp.tps
    return out_


def compare_bench(instances: int, solvers: str, jobs: int, time_limit: float, repeat: int, out: Path, say: Any,
                  quiet: bool) -> dict[str, Any]:
    say("compare: an untimed run of 2 instances first (numba's on-disk cache filled for both)")
    subprocess.run([sys.executable, "-m", "experiments.compare", "--suite", "random:2", "--solvers", solvers,
                    "--no-plots", "--quiet", "--out", str(out / "compare-prime")], cwd=ROOT,
                   capture_output=True, text=True)

    def run(backend: str) -> dict[str, Any]:
        dest = out / f"compare-{backend}"
        args = ["-m", "experiments.compare", "--suite", f"random:{instances}", "--solvers", solvers,
                "--jobs", str(jobs), "--time-limit", f"{time_limit:g}", "--no-plots", "--quiet",
                "--out", str(dest), "--backend", backend]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"compare on {backend}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
        doc = json.loads((dest / "report.json").read_text())
        answer = [proc.returncode, sorted((i["name"], i["optimum"], i["verdict"]) for i in doc["instances"])]
        return {"exit": proc.returncode, "work_s": doc["meta"]["wall_s"], "process_s": wall,
                "verdicts": doc["summary"]["verdicts"], "answer": answer}

    return _pairs(f"compare random:{instances} ({solvers}, --jobs {jobs}, --time-limit {time_limit:g})", run,
                  repeat, say)


def render(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| benchmark | local | Ray | Ray / local (work) | Ray / local (process) | each pair (work) | same results |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        loc, ray = r["median"]["local"], r["median"]["ray"]
        pairs = ", ".join(f"{x:.2f}" for x in r["pair_ratios_work"])
        lines.append(f"| {r['what']} | {loc['work_s']:.1f} s ({loc['process_s']:.1f} s) | {ray['work_s']:.1f} s "
                     f"({ray['process_s']:.1f} s) | {r['ratio_work']:.2f} | {r['ratio_process']:.2f} | {pairs} | "
                     f"{'yes' if r['same'] else 'NO'} |")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    ap = flags.make_parser(PROG, __doc__)
    ap.add_argument("--instances", type=positive_int, default=200, metavar="N",
                    help="random instances of the compare sweep (default 200)")
    ap.add_argument("--solvers", type=flags.name_list(_solver_names(), "solver"), default=("dp", "brute", "cpsat"),
                    metavar="A,B", help="solvers of the compare sweep (default dp,brute,cpsat)")
    ap.add_argument("--split-solver", choices=("cpsat", "milp-highs", "milp"), default="cpsat",
                    help="the exact solver of the split proof (default cpsat)")
    ap.add_argument("--skip", type=flags.name_list(("split", "compare"), "benchmark"), default=(), metavar="NAME",
                    help="benchmarks to leave out: split, compare")
    ap.add_argument("--repeat", type=positive_int, default=1, metavar="R",
                    help="runs per backend, the order alternating; medians are reported (default 1)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    flags.add_time_limit(ap, 10.0, "one solve of the compare sweep")
    flags.add_jobs(ap)
    for action in ap._actions:  # the shared flag, with this command's default
        if action.dest == "jobs":
            action.default = 2
            action.help = "runs at once: compare's solver processes or Ray actors, the split's subproblems (default 2)"
    flags.add_out(ap, "out/bench_backends", "bench_backends.json and the runs' reports")
    flags.add_quiet(ap)
    return ap


def _solver_names() -> list[str]:
    from piper.solvers.registry import solver_names

    return list(solver_names())


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from piper.solvers.execution import ray_module

    ray_module()  # exit 2 with one line when Ray is missing
    out = flags.out_dir(args.out)
    say = flags.progress(args.quiet)
    jobs = args.jobs
    results = []
    if "split" not in args.skip:
        results.append(split_bench(args.split_solver, jobs, args.repeat, out, say, args.quiet))
    if "compare" not in args.skip:
        results.append(compare_bench(args.instances, ",".join(args.solvers), jobs, args.time_limit, args.repeat, out,
                                     say, args.quiet))
    doc = {"revision": revision(), "results": results}
    (out / "bench_backends.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    if args.json:
        print(json.dumps(doc, default=str))
    else:
        print(f"revision {doc['revision']}")
        print(render(results))
    return 0 if all(r["same"] for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_main, argv, prog=PROG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
