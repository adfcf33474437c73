"""Time to a proven optimum for each exact solver (tables of its runs: docs/results/exact-models.md).

    python -m experiments.bench_exact [--quick] [--time-limit SECONDS] [--out DIR]
        [--solvers dp,cpsat,milp-highs,milp] [--sizes 8,12,16,24,32] [--ks 4,8,16]
        [--shapes chain,branchy] [--threads N] [--cp-workers W] [--no-warm] [--split]
        [--table-only] [--quiet] [--backend local|ray] [--address ADDR]

Instances: ``random_problem(seed, n, shape, devices=k, microbatches=2k, degrees=(1, 2, 4),
max_tmpcs=2, t1_missing=0)`` with seed = 1000 + 100 n + k, and the memory limit set by
``witness_memory`` (a random plan's peak stage memory times 1.0-1.15), so every draw is
feasible and memory binds; should a draw still be infeasible, it is kept and a
replacement (seed + 7919) is added.

Every (instance, solver) run is appended to ``DIR/runs.jsonl`` as soon as it finishes,
with its configuration: every flag that decides what a run computes (:data:`CONFIG_FLAGS`)
and the code's revision (the git commit, with a hash of the uncommitted changes when the
tree is dirty), and its id (:func:`config_id`). Re-running with the same flags at the same
revision skips the runs already there (a long bench resumes); runs made with other flags
or at another revision are never reused, and the table printed at the end holds only the
runs of this configuration (``--table-only`` prints the last configuration's table).

Cells: seconds to a proven optimum; "x (infeasible)" for a proof of infeasibility;
">L, +g%" when the limit hit with an incumbent g% above the best proven optimum of the
row; ">L, optimum found" when the incumbent is that optimum but unproven; ">L, no
solution". Warm starts: when the DP is available and finished, its plan is given to
the MILP (cutoff) and CP-SAT (proof search below it), unless ``--no-warm``. Times are
the solvers' wall times including model building (``Result.time_s``); the DP is run
once on a tiny instance first so that its JIT compilation is not timed.

Every run is made in an isolated worker (``piper.solvers.execution``): a local process, or with
``--backend ray`` a Ray actor (on the cluster at ``--address`` / ``RAY_ADDRESS``, or a
local Ray instance); a run that has not answered 2x its time limit + 30 s after it
started is killed ("killed"), a worker that dies is an "error" row, and the bench goes on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.lib import flags
from experiments.lib.instances import bench_instance
from experiments.lib.revision import revision
from piper.cli.common import ArgumentParser, positive_int, run_main, seconds_arg
from piper.core.errors import UsageError
from piper.core.json_values import jsonable
from piper.core.options import Options
from piper.core.problem import Problem
from piper.dp.ideals import count_ideals
from piper.solvers.execution import WorkerPool, add_backend_args, execution_options

SOLVER_ORDER = ("dp", "cpsat", "milp-highs", "milp")
HEADERS = {"dp": "DP", "cpsat": "CP-SAT", "milp-highs": "MILP HiGHS", "milp": "MILP CBC"}


def run_one(problem: Problem, solver: str, options: Options) -> dict[str, Any]:
    from piper.solvers.registry import get_solver

    t0 = time.perf_counter()
    try:
        res = get_solver(solver)(problem, options)
    except ImportError as exc:
        return {"status": "unavailable", "error": str(exc)}
    except Exception as exc:  # a crash is a result too; keep the bench going
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "time_s": time.perf_counter() - t0}
    st = res.stats
    return {
        "status": res.status.value,
        "tps": res.tps if math.isfinite(res.tps) else None,
        "bound": res.bound if math.isfinite(res.bound) else None,
        "time_s": res.time_s,
        "plan": None if res.plan is None else res.plan.to_dict(),
        "variables": st.get("variables"),
        "constraints": st.get("constraints"),
        "message": res.message,
        "warm_start": st.get("warm_start"),
    }


def hard_timeout(limit: float) -> float:
    """Seconds after which a run's worker is killed: 2x the time limit + 30 s."""
    return 2 * limit + 30.0


def run_isolated(pool: WorkerPool, problem: Problem, solver: str, options: Options) -> dict[str, Any]:
    """:func:`run_one` in a worker of ``pool`` (:mod:`piper.solvers.execution`, local process or Ray
    actor), killed at the pool's hard timeout: status "killed" (the solver did not honour
    its time limit) or "error" (the worker died)."""
    out = pool.call(run_one, problem, solver, options)
    if out.ok:
        return out.value
    status = "killed" if out.error == "timeout" else "error"
    return {"status": status, "error": out.message, "time_s": out.seconds}


def load_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and all(key in rec for key in ("n", "shape", "k", "seed", "solver", "status")):
                out.append(rec)  # lines of other benches' files are not runs of this one
    return out


def cell(run: dict[str, Any] | None, best: float | None, limit: float) -> str:
    if run is None:
        return "-"
    st = run["status"]
    if st == "error" and "ideals" in (run.get("error") or ""):
        return "refused (>200k ideals)"
    if st == "error" and "max_sequences" in (run.get("error") or ""):
        return "refused (too many sequences)"
    if st in ("unavailable", "error", "killed"):
        return st
    t = run.get("time_s") or 0.0
    if st == "optimal":
        return f"{t:.2f}"
    if st == "infeasible":
        return f"{t:.2f} (infeasible)"
    lim = f">{limit:g}"
    if run.get("tps") is None:
        return f"{lim}, no solution"
    if best is None:
        return f"{lim}, best known" if run["tps"] is not None else f"{lim}, no solution"
    gap = run["tps"] / best - 1.0
    if gap <= 1e-6:
        return f"{lim}, optimum found"
    return f"{lim}, +{100 * gap:.1f}%"


def table(runs: list[dict[str, Any]], solvers: list[str], limit: float) -> str:
    rows: dict[tuple, dict[str, dict[str, Any]]] = {}
    meta: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        key = (r["n"], r["shape"], r["k"], r["seed"])
        rows.setdefault(key, {})[r["solver"]] = r
        meta[key] = r
    head = ["n", "DAG", "k", "m", "#ideals"] + [HEADERS.get(s, s) for s in solvers] + ["MILP vars/rows", "CP vars/cons"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(rows, key=lambda kk: (kk[0], kk[1] != "chain", kk[2], kk[3])):
        per = rows[key]
        proven = [r["tps"] for r in per.values() if r["status"] == "optimal" and r.get("tps") is not None]
        best = min(proven) if proven else None
        if best is None:
            inc = [r["tps"] for r in per.values() if r.get("tps") is not None]
            best_known = min(inc) if inc else None
        else:
            best_known = best
        cells = []
        for s in solvers:
            c = cell(per.get(s), best, limit)
            r = per.get(s)
            if best is None and r is not None and r.get("tps") is not None and r["status"] == "feasible":
                c = f">{limit:g}, best known" if r["tps"] <= best_known * (1 + 1e-6) else f">{limit:g}, +{100 * (r['tps'] / best_known - 1):.1f}% vs best known"
            cells.append(c)
        mi = per.get("milp-highs") or per.get("milp") or {}
        cp = per.get("cpsat") or {}
        m = meta[key]
        seed_note = "" if m.get("replacement") is None else "*"
        lines.append(
            "| "
            + " | ".join(
                [str(key[0]), key[1] + seed_note, str(key[2]), str(m["m"]), str(m.get("ideals") or "-")]
                + cells
                + [f"{mi.get('variables', '-')}/{mi.get('constraints', '-')}", f"{cp.get('variables', '-')}/{cp.get('constraints', '-')}"]
            )
            + " |"
        )
    return "\n".join(lines)


def summary(runs: list[dict[str, Any]]) -> str:
    """Per (n, DAG, k): which exact model proved its feasible draw (or, when every draw was
    infeasible, its last draw's infeasibility)."""
    groups: dict[tuple, dict[int, dict[str, dict[str, Any]]]] = {}
    for r in runs:
        groups.setdefault((r["n"], r["shape"], r["k"]), {}).setdefault(r["seed"], {})[r["solver"]] = r
    lines, proven, total = [], 0, 0
    for key in sorted(groups, key=lambda kk: (kk[0], kk[1] != "chain", kk[2])):
        draws = groups[key]
        feasible = [sd for sd, per in draws.items() if any(x["status"] in ("optimal", "feasible") for x in per.values())]
        seed = feasible[0] if feasible else max(draws)
        per = draws[seed]
        by = [s for s in ("cpsat", "milp-highs", "milp") if per.get(s, {}).get("status") in ("optimal", "infeasible")]
        total += 1
        proven += bool(by)
        proofs = [x["status"] for per_ in draws.values() for x in per_.values()]
        what = "feasible draw" if feasible else ("no plan found" if "infeasible" not in proofs else "all draws infeasible")
        lines.append(f"n={key[0]} {key[1]} k={key[2]} ({what}, seed {seed}): proven by {', '.join(by) or 'none'}")
    lines.append(f"rows proven by MILP or CP-SAT: {proven} of {total}")
    return "\n".join(lines)


PROG = "python -m experiments.bench_exact"
RUNS_FILE = "runs.jsonl"
#: the flags that decide what a run computes: rows are reused only when all of them and
#: the revision are the same (``--out``, ``--quiet``, ``--jobs``, ``--table-only`` are not)
CONFIG_FLAGS = ("quick", "time_limit", "solvers", "sizes", "ks", "shapes", "threads", "cp_workers", "no_warm", "split")

LEGEND = """Columns: n = layers; DAG = chain (a chain with skip edges) or branchy; k = devices (N = 2k
microbatches); m = edges; #ideals = successor-closed layer sets (the DP's state count; "-" above
200,000); one column per solver: seconds to a proven optimum (model building included), "(infeasible)"
for a proof of infeasibility, ">L, optimum found" when the time limit L hit with the row's proven
optimum as incumbent, ">L, +g%" with an incumbent g% above it ("vs best known" when no solver proved
the row), ">L, no solution", "refused (...)" when the solver declines the size (the DP above
200,000 ideals, the split above its sequence limit); MILP vars/rows and CP vars/cons = the models' sizes (HiGHS's MILP, or
CBC's). A * after the DAG marks a replacement draw (the first draw was infeasible)."""


def run_config(args: argparse.Namespace, revision: str) -> dict[str, Any]:
    """Every flag that decides what a run computes, and the code's revision (with its
    dirty-tree marker): the key under which rows are reused."""
    return {"revision": revision, **{flag: jsonable(getattr(args, flag)) for flag in CONFIG_FLAGS}}


def config_id(config: dict[str, Any]) -> str:
    """12 hex digits naming a run configuration (SHA-1 of its canonical JSON)."""
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def build_parser() -> ArgumentParser:
    from piper.solvers.registry import solver_names

    ap = flags.make_parser(PROG, __doc__, epilog=LEGEND)
    ap.add_argument("--quick", action="store_true", help="smoke run: n in {8, 12}, k = 4, 10 s limit")
    ap.add_argument("--time-limit", type=seconds_arg, default=None, metavar="SECONDS",
                    help="time limit of one run, seconds (default 60; 10 with --quick)")
    ap.add_argument("--solvers", type=flags.name_list(solver_names(), "solver"), default=SOLVER_ORDER,
                    metavar="A,B", help=f"solvers, comma-separated, in this order (default {','.join(SOLVER_ORDER)})")
    ap.add_argument("--sizes", type=flags.int_list, default=None, metavar="N,N",
                    help="layer counts n, comma-separated (default 8,12,16,24,32; 8,12 with --quick)")
    ap.add_argument("--ks", type=flags.int_list, default=None, metavar="K,K",
                    help="device counts k, comma-separated (default 4,8,16; 4 with --quick)")
    ap.add_argument("--shapes", type=flags.name_list(("chain", "branchy"), "shape"), default=("chain", "branchy"),
                    metavar="A,B", help="DAG shapes, comma-separated: chain, branchy (default both)")
    ap.add_argument("--threads", type=positive_int, default=2, metavar="N",
                    help="threads of CBC and HiGHS, and CP-SAT's workers unless --cp-workers (default 2)")
    ap.add_argument("--cp-workers", type=positive_int, default=None, metavar="W",
                    help="CP-SAT workers (default: --threads; with a warm start CP-SAT runs its proof "
                         "portfolio, which on 2 cores proved 24-chain k=16 in 28 s with 2 workers, "
                         "35 s with 3 and 52 s with 4)")
    ap.add_argument("--no-warm", action="store_true", help="no warm start from the DP's plan")
    ap.add_argument("--split", action="store_true",
                    help="milp/milp-highs/cpsat: split the proof below the DP's plan over option sequences "
                         "(params['split']; rows without a DP plan run unsplit)")
    flags.add_out(ap, "out/bench_exact", f"{RUNS_FILE}, every run appended as it finishes; an interrupted bench "
                 "resumes from the rows made with the same flags at the same revision")
    ap.add_argument("--table-only", action="store_true",
                    help="print the table of the last configuration in DIR/runs.jsonl and exit")
    flags.add_quiet(ap)
    flags.add_jobs(ap, 1, "the runs are timed")
    add_backend_args(ap)
    return ap


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    args.time_limit = args.time_limit or (10.0 if args.quick else 60.0)
    args.sizes = args.sizes or ((8, 12) if args.quick else (8, 12, 16, 24, 32))
    args.ks = args.ks or ((4,) if args.quick else (4, 8, 16))
    out = flags.runs_file(args.out, RUNS_FILE)
    say = flags.progress(args.quiet)
    if args.table_only:
        runs = load_runs(out)
        if not runs:
            raise UsageError(f"no runs in {out}")
        last = runs[-1].get("config_id")
        runs = [r for r in runs if r.get("config_id") == last]
        config = runs[-1].get("config") or {}
        print(f"configuration {last}: {json.dumps(config, sort_keys=True)}")
        solvers = [s for s in config.get("solvers", SOLVER_ORDER)]
        print(table(runs, solvers, float(config.get("time_limit", args.time_limit))))
        print(LEGEND)
        print()
        print(summary(runs))
        return 0
    config = run_config(args, revision())
    cid = config_id(config)
    say(f"configuration {cid} (revision {config['revision']}); runs in {out}")
    mine = [r for r in load_runs(out) if r.get("config_id") == cid]
    if mine:
        say(f"resuming: {len(mine)} runs of this configuration already in {out}")
    solvers = list(args.solvers)
    with WorkerPool(execution_options(args, hard_timeout(args.time_limit), ("baselines",))) as pool:
        bench(args, config, cid, out, mine, say, pool)
    runs = [r for r in load_runs(out) if r.get("config_id") == cid]
    print(f"configuration {cid}: {json.dumps(config, sort_keys=True)}")
    print(table(runs, solvers, args.time_limit))
    print(LEGEND)
    print()
    print(summary(runs))
    return 0


def bench(args: argparse.Namespace, config: dict[str, Any], cid: str, out: Path, done_runs: list[dict[str, Any]],
          say: Any, pool: WorkerPool) -> None:
    """Run every (instance, solver) not in ``done_runs`` (rows of this configuration), each
    in a worker of ``pool``, and append each run to ``out`` as it finishes."""
    from piper.core.plan import plan_from_dict

    limit = args.time_limit
    solvers = list(args.solvers)
    done = {(r["n"], r["shape"], r["k"], r["seed"], r["solver"]): r for r in done_runs}
    base = Options(threads=args.threads, time_limit_s=limit)

    def warm_up() -> None:  # compile the DP's numba kernels in the worker, outside the timings
        if "dp" in solvers:
            pool.call(run_one, bench_instance(6, "branchy", 4), "dp", replace(base, time_limit_s=None),
                      timeout=max(600.0, hard_timeout(limit)))

    warm_up()
    for n in args.sizes:
        for shape in args.shapes:
            for k in args.ks:
                seeds = [1000 + 100 * n + k]
                j = 0
                while j < len(seeds):
                    seed = seeds[j]
                    j += 1
                    problem = bench_instance(n, shape, k, seed)
                    meta = {"n": n, "shape": shape, "k": k, "seed": seed, "m": len(problem.edges),
                            "ideals": count_ideals(problem), "replacement": None if j == 1 else seeds[0],
                            "time_limit": limit, "revision": config["revision"], "cp_workers": args.cp_workers,
                            "threads": args.threads, "config_id": cid, "config": config}
                    warm = None
                    verdicts = []
                    for solver in solvers:
                        prev = done.get((n, shape, k, seed, solver))
                        if prev is not None:
                            verdicts.append(prev["status"])
                            if solver == "dp" and prev.get("plan") and prev["status"] == "optimal":
                                warm = plan_from_dict(prev["plan"])
                            continue
                        params: dict[str, Any] = {}
                        if solver == "cpsat" and args.cp_workers is not None:
                            params["num_workers"] = args.cp_workers
                        use_warm = None if args.no_warm else warm
                        if args.split and use_warm is not None and solver in ("milp", "milp-highs", "cpsat"):
                            params["split"] = "sequences"
                        opts = replace(base, params=params, warm_start=use_warm)
                        run = run_isolated(pool, problem, solver, opts)
                        if run["status"] in ("killed", "error") and "time_s" in run:
                            warm_up()  # a fresh worker replaces the one that was killed or died
                        if solver == "dp" and run.get("plan") and run["status"] == "optimal":
                            warm = plan_from_dict(run["plan"])
                        verdicts.append(run["status"])
                        rec = {**meta, "solver": solver, "warm": opts.warm_start is not None,
                               "split": params.get("split", "none"), **run}
                        with out.open("a") as fh:
                            fh.write(json.dumps(rec) + "\n")
                        say(f"n={n} {shape} k={k} seed={seed} {solver}: {run['status']} "
                            f"tps={run.get('tps')} t={run.get('time_s', 0):.2f}s")
                    if "infeasible" in verdicts and len(seeds) < 8:
                        seeds.append(seed + 7919)  # keep the infeasible row, add a feasible replacement


def main(argv: list[str] | None = None) -> int:
    return run_main(_main, argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
