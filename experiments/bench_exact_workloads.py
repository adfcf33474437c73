"""CP-SAT's time to prove the DP's plan optimal on the paper's workloads, with and
without the TMPC exchange rule of repeated layers (``ModelData.tmpc_exclusions``), and
with the proof split over the stages' option sequences (``params["split"]``).

    python -m experiments.bench_exact_workloads [--time-limit SECONDS] [--out DIR] [--cases I,J] [--quiet]

For each case: the DP's plan (exact knapsack), then CP-SAT's proof search below it
(2 workers) with ``tmpc_symmetry`` on and off, then split (rule on; "n/a" where the
split refuses: too many sequences, or no plan to prove). Prints one line per run (progress on
stderr) and a table; runs are appended to ``DIR/runs.jsonl``, one JSON line per case with the
revision. Timings are wall seconds on a noisy machine: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import time

from baselines.exact.model_data import build_model_data
from experiments.lib import flags
from experiments.lib.revision import revision
from experiments.lib.suites import GIB, WORKLOADS_DIR
from piper import Options, SolverError, load_problem, solve
from piper.cli.common import ArgumentParser, run_main
from piper.core.json_values import jsonable

#: (label, file, devices k, memory per device in bytes, microbatches N)
CASES: list[tuple[str, str, int, float, int]] = [
    ("BERT-32 k=4 8GiB N=64", "bert32a100.json", 4, 8 * GIB, 64),
    ("BERT-32 k=8 8GiB N=64", "bert32a100.json", 8, 8 * GIB, 64),
    ("BERT-32 k=8 6GiB N=128", "bert32a100.json", 8, 6 * GIB, 128),
    ("BERT-32 k=16 8GiB N=64", "bert32a100.json", 16, 8 * GIB, 64),
    ("ResNet-50 k=8 16GiB", "resnet.json", 8, 16 * GIB, 7680),
    ("GNMT k=4 1.2GiB N=256", "gnmt.json", 4, 1.2 * GIB, 256),
]


PROG = "python -m experiments.bench_exact_workloads"
RUNS_FILE = "runs.jsonl"


def _case_list(text: str) -> tuple[int, ...]:
    """--cases: comma-separated indices into :data:`CASES`."""
    try:
        picked = flags.int_list(text, minimum=0)
    except argparse.ArgumentTypeError:
        picked = ()
    if not picked or max(picked) >= len(CASES):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of case indices 0..{len(CASES) - 1}")
    return picked


def build_parser() -> ArgumentParser:
    ap = flags.make_parser(PROG, __doc__)
    flags.add_time_limit(ap, 60.0, "one CP-SAT run")
    flags.add_out(ap, "out/bench_exact_workloads", f"{RUNS_FILE}, one JSON line per case (appended), each with "
                 "the revision")
    ap.add_argument("--cases", type=_case_list, default=None, metavar="I,J",
                    help="comma-separated case indices: " + "; ".join(f"{i} {c[0]}" for i, c in enumerate(CASES))
                    + " (default: all)")
    flags.add_quiet(ap)
    flags.add_jobs(ap, 1, "the runs are timed")
    return ap


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    picked = CASES if args.cases is None else [CASES[i] for i in args.cases]
    say = flags.progress(args.quiet)
    rev = revision()
    runs = flags.runs_file(args.out, RUNS_FILE)
    rows = []
    with runs.open("a") as out:
        for label, file, k, memory, n_mb in picked:
            problem = load_problem(WORKLOADS_DIR / file).with_cluster(devices=k, memory=memory, microbatches=n_mb)
            classes = build_model_data(problem, Options()).tmpc_classes()
            t0 = time.perf_counter()
            dp = solve(problem, Options(), solver="dp")
            dp_s = time.perf_counter() - t0
            row = {"case": label, "revision": rev, "classes": [len(c) for c in classes], "dp_status": dp.status.value,
                   "dp_tps": jsonable(dp.tps), "dp_s": dp_s}
            for sym in (True, False):
                say(f"{label}: cpsat, exchange rule {'on' if sym else 'off'} ...")
                res = solve(problem, Options(threads=2, time_limit_s=args.time_limit, warm_start=dp.plan,
                                             params={"tmpc_symmetry": sym}), solver="cpsat")
                key = "on" if sym else "off"
                row[key] = {"status": res.status.value, "tps": jsonable(res.tps), "bound": jsonable(res.bound), "time_s": res.time_s,
                            "clauses": res.stats.get("symmetry_clauses", 0)}
            # the proof split over option sequences (baselines.exact.sequences), exchange rule on
            if dp.plan is None:
                row["split"] = {"status": "n/a", "note": "no plan to prove"}
            else:
                say(f"{label}: cpsat, split over option sequences ...")
                try:
                    res = solve(problem, Options(threads=2, time_limit_s=args.time_limit, warm_start=dp.plan,
                                                 params={"split": "sequences"}), solver="cpsat")
                except SolverError as exc:
                    row["split"] = {"status": "n/a", "note": str(exc)}
                else:
                    row["split"] = {"status": res.status.value, "tps": jsonable(res.tps), "bound": jsonable(res.bound),
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


def main(argv: list[str] | None = None) -> int:
    return run_main(_main, argv, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
