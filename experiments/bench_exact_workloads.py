"""CP-SAT's time to prove the DP's plan optimal on the paper's workloads, with and
without the TMPC exchange rule of repeated layers (``ModelData.tmpc_exclusions``), and
with the proof split over the stages' option sequences (``params["split"]``).

    python -m experiments.bench_exact_workloads [--time-limit 60] [--out FILE.jsonl]

For each case: the DP's plan (exact knapsack), then CP-SAT's proof search below it
(2 workers) with ``tmpc_symmetry`` on and off, then split (rule on; "n/a" where the
split refuses: too many sequences, or no plan to prove). Prints one line per run (progress on
stderr) and a table; runs are written as JSON lines. Timings are wall seconds on a
noisy machine: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from baselines import solve
from baselines._model_data import build_model_data
from piper import Options, SolverError, load_problem

WORKLOADS = Path(__file__).resolve().parent / "workloads"
GiB = 2**30

#: (label, file, devices k, memory per device in bytes, microbatches N)
CASES: list[tuple[str, str, int, float, int]] = [
    ("BERT-32 k=4 8GiB N=64", "bert32a100.json", 4, 8 * GiB, 64),
    ("BERT-32 k=8 8GiB N=64", "bert32a100.json", 8, 8 * GiB, 64),
    ("BERT-32 k=8 6GiB N=128", "bert32a100.json", 8, 6 * GiB, 128),
    ("BERT-32 k=16 8GiB N=64", "bert32a100.json", 16, 8 * GiB, 64),
    ("ResNet-50 k=8 16GiB", "resnet.json", 8, 16 * GiB, 7680),
    ("GNMT k=4 1.2GiB N=256", "gnmt.json", 4, 1.2 * GiB, 256),
]


def _num(x: float) -> float | None:
    """JSON has no infinity: None for 'no plan' (TPS) or 'proven infeasible' (bound)."""
    return x if math.isfinite(x) else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_exact_workloads", description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per CP-SAT run (default 60)")
    ap.add_argument("--out", default="/tmp/bench_exact_workloads.jsonl", help="JSON lines of the runs")
    ap.add_argument("--cases", default=None, help="comma-separated case indices (default: all)")
    args = ap.parse_args(argv)
    picked = CASES
    if args.cases:
        try:
            picked = [CASES[int(i)] for i in args.cases.split(",")]
        except (ValueError, IndexError):
            ap.error(f"--cases: {args.cases!r} is not a list of case indices 0..{len(CASES) - 1}")
    rows = []
    with open(args.out, "a") as out:
        for label, file, k, memory, n_mb in picked:
            problem = load_problem(WORKLOADS / file).with_cluster(devices=k, memory=memory, microbatches=n_mb)
            classes = build_model_data(problem, Options()).tmpc_classes()
            t0 = time.perf_counter()
            dp = solve(problem, Options(), solver="dp")
            dp_s = time.perf_counter() - t0
            row = {"case": label, "classes": [len(c) for c in classes], "dp_status": dp.status.value,
                   "dp_tps": _num(dp.tps), "dp_s": dp_s}
            for sym in (True, False):
                print(f"{label}: cpsat, exchange rule {'on' if sym else 'off'} ...", file=sys.stderr, flush=True)
                res = solve(problem, Options(threads=2, time_limit_s=args.time_limit, warm_start=dp.plan,
                                             params={"tmpc_symmetry": sym}), solver="cpsat")
                key = "on" if sym else "off"
                row[key] = {"status": res.status.value, "tps": _num(res.tps), "bound": _num(res.bound), "time_s": res.time_s,
                            "clauses": res.stats.get("symmetry_clauses", 0)}
            # the proof split over option sequences (baselines._split), exchange rule on
            if dp.plan is None:
                row["split"] = {"status": "n/a", "note": "no plan to prove"}
            else:
                print(f"{label}: cpsat, split over option sequences ...", file=sys.stderr, flush=True)
                try:
                    res = solve(problem, Options(threads=2, time_limit_s=args.time_limit, warm_start=dp.plan,
                                                 params={"split": "sequences"}), solver="cpsat")
                except SolverError as exc:
                    row["split"] = {"status": "n/a", "note": str(exc)}
                else:
                    row["split"] = {"status": res.status.value, "tps": _num(res.tps), "bound": _num(res.bound),
                                    "time_s": res.time_s, "sequences": res.stats["split"]["sequences"],
                                    "refuted": res.stats["split"]["refuted"]}
            out.write(json.dumps(row) + "\n")
            out.flush()
            rows.append(row)
    def cell(x: dict) -> str:
        if x["status"] in ("optimal", "infeasible"):
            return f"{x['time_s']:.2f}" + (" (infeasible)" if x["status"] == "infeasible" else "")
        return f">{args.time_limit:g}, {x['status']}"

    def split_cell(x: dict) -> str:
        if x["status"] == "n/a":
            return "n/a (" + ("too many sequences" if "max_sequences" in x["note"] else x["note"]) + ")"
        return f"{cell(x)} ({x['refuted']}/{x['sequences']} sequences refuted)"

    print("| case | repeated-layer classes | DP TPS | DP (s) | CP-SAT, rule on (s) | CP-SAT, rule off (s) "
          "| CP-SAT, rule on, split (s) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        dp_tps = "infeasible" if r["dp_tps"] is None else f"{r['dp_tps']:.6g}"
        print(f"| {r['case']} | {r['classes']} | {dp_tps} | {r['dp_s']:.2f} | {cell(r['on'])} "
              f"({r['on']['clauses']} clauses) | {cell(r['off'])} | {split_cell(r['split'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
