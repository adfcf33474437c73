"""Time to a proven optimum for each exact solver (README's table; measurements in experiments/EXACT_MODELS.md).

    python -m experiments.bench_exact [--quick] [--time-limit 60] [--out runs.jsonl]
        [--solvers dp,cpsat,milp-highs,milp] [--sizes 8,12,16,24,32] [--ks 4,8,16]
        [--shapes chain,branchy] [--cp-workers W] [--no-warm]

Instances: ``random_problem(seed, n, shape, devices=k, microbatches=2k, degrees=(1, 2, 4),
max_tmpcs=2, t1_missing=0)`` with seed = 1000 + 100 n + k, and the memory limit set by
``witness_memory`` (a random plan's peak stage memory times 1.0-1.15), so every draw is
feasible and memory binds; should a draw still be infeasible, it is kept and a
replacement (seed + 7919) is added. Every (instance, solver) run is appended to the JSONL
file as soon as it finishes (re-running skips rows already there, so a long bench can be
resumed), and the table is printed at the end (``--table-only`` prints it from the file).

Cells: seconds to a proven optimum; "x (infeasible)" for a proof of infeasibility;
">L, +g%" when the limit hit with an incumbent g% above the best proven optimum of the
row; ">L, optimum found" when the incumbent is that optimum but unproven; ">L, no
solution". Warm starts: when the DP is available and finished, its plan is given to
the MILP (cutoff) and CP-SAT (proof search below it), unless ``--no-warm``. Times are
the solvers' wall times including model building (``Result.time_s``); the DP is run
once on a tiny instance first so that its JIT compilation is not timed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.instances import random_problem, witness_memory
from piper.options import Options
from piper.problem import Problem

SOLVER_ORDER = ("dp", "cpsat", "milp-highs", "milp")
HEADERS = {"dp": "DP", "cpsat": "CP-SAT", "milp-highs": "MILP HiGHS", "milp": "MILP CBC"}


def instance(n: int, shape: str, k: int, seed: int | None = None) -> Problem:
    """The bench's draw: every layer has t = 1 (t = 2 and 4 each missing with
    probability 0.2), and the memory limit comes from a random witness plan, so the
    instance is feasible and memory binds (:func:`experiments.instances.witness_memory`)."""
    seed = 1000 + 100 * n + k if seed is None else seed
    raw = random_problem(seed, n, shape, devices=k, microbatches=2 * k, degrees=(1, 2, 4), max_tmpcs=2, t1_missing=0.0)
    return witness_memory(raw, seed) or raw


def count_ideals(problem: Problem, limit: int = 200_000) -> int | None:
    try:
        from piper.ideals import enumerate_ideals

        return len(enumerate_ideals(problem, limit))
    except Exception:
        return None


def run_one(problem: Problem, solver: str, options: Options) -> dict[str, Any]:
    from baselines import get_solver

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
    if st in ("unavailable", "error"):
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_exact", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: n in {8, 12}, k = 4, 10 s limit")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per run (default 60; 10 with --quick)")
    ap.add_argument("--solvers", default=",".join(SOLVER_ORDER))
    ap.add_argument("--sizes", default=None)
    ap.add_argument("--ks", default=None)
    ap.add_argument("--shapes", default="chain,branchy")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cp-workers", type=int, default=None,
                    help="CP-SAT workers (default: --threads; with a warm start CP-SAT runs its proof "
                         "portfolio, which on 2 cores proved 24-chain k=16 in 28 s with 2 workers, "
                         "35 s with 3 and 52 s with 4)")
    ap.add_argument("--no-warm", action="store_true", help="no warm start from the DP's plan")
    ap.add_argument("--split", action="store_true",
                    help="milp/milp-highs/cpsat: split the proof below the DP's plan over option sequences "
                         "(params['split']; rows without a DP plan run unsplit; use its own --out file)")
    ap.add_argument("--out", default="/tmp/bench_exact.jsonl", help="JSONL file of runs (appended; resumable)")
    ap.add_argument("--table-only", action="store_true", help="print the table from --out and exit")
    args = ap.parse_args(argv)
    limit = args.time_limit or (10.0 if args.quick else 60.0)
    sizes = [int(x) for x in (args.sizes or ("8,12" if args.quick else "8,12,16,24,32")).split(",")]
    ks = [int(x) for x in (args.ks or ("4" if args.quick else "4,8,16")).split(",")]
    shapes = args.shapes.split(",")
    solvers = [s for s in args.solvers.split(",") if s]
    out = Path(args.out)
    if args.table_only:
        print(table(load_runs(out), solvers, limit))
        print()
        print(summary(load_runs(out)))
        return 0
    done = {(r["n"], r["shape"], r["k"], r["seed"], r["solver"]) for r in load_runs(out)}
    base = Options(threads=args.threads, time_limit_s=limit)
    try:
        import subprocess

        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except OSError:
        rev = None
    from piper.plan import plan_from_dict

    if "dp" in solvers:  # compile the DP's numba kernels once, outside the timings
        run_one(instance(6, "branchy", 4), "dp", replace(base, time_limit_s=None))

    for n in sizes:
        for shape in shapes:
            for k in ks:
                seeds = [1000 + 100 * n + k]
                j = 0
                while j < len(seeds):
                    seed = seeds[j]
                    j += 1
                    problem = instance(n, shape, k, seed)
                    meta = {"n": n, "shape": shape, "k": k, "seed": seed, "m": len(problem.edges),
                            "ideals": count_ideals(problem), "replacement": None if j == 1 else seeds[0],
                            "time_limit": limit, "rev": rev, "cp_workers": args.cp_workers, "threads": args.threads}
                    warm = None
                    verdicts = []
                    for solver in solvers:
                        if (n, shape, k, seed, solver) in done:
                            prev = [r for r in load_runs(out) if (r["n"], r["shape"], r["k"], r["seed"], r["solver"]) == (n, shape, k, seed, solver)][-1]
                            verdicts.append(prev["status"])
                            if solver == "dp" and prev.get("plan"):
                                warm = plan_from_dict(prev["plan"])
                            continue
                        params: dict[str, Any] = {}
                        if solver == "cpsat" and args.cp_workers is not None:
                            params["num_workers"] = args.cp_workers
                        use_warm = None if args.no_warm else warm
                        if args.split and use_warm is not None and solver in ("milp", "milp-highs", "cpsat"):
                            params["split"] = "sequences"
                        opts = replace(base, params=params, warm_start=use_warm)
                        run = run_one(problem, solver, opts)
                        if solver == "dp" and run.get("plan") and run["status"] == "optimal":
                            warm = plan_from_dict(run["plan"])
                        verdicts.append(run["status"])
                        rec = {**meta, "solver": solver, "warm": opts.warm_start is not None,
                               "split": params.get("split", "none"), **run}
                        with out.open("a") as fh:
                            fh.write(json.dumps(rec) + "\n")
                        print(f"n={n} {shape} k={k} seed={seed} {solver}: {run['status']} "
                              f"tps={run.get('tps')} t={run.get('time_s', 0):.2f}s", file=sys.stderr, flush=True)
                    if "infeasible" in verdicts and len(seeds) < 8:
                        seeds.append(seed + 7919)  # keep the infeasible row, add a feasible replacement
    print(table(load_runs(out), solvers, limit))
    print()
    print(summary(load_runs(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
