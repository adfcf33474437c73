"""Speed and memory benchmarks of Piper's DP.

    python -m experiments.bench dp [--quick] [--cases bert,resnet,gnmt] [--modes greedy,exact]
        [--gnmt-ks 8,16,32,64] [--timeout 900] [--out runs.jsonl]

Every case runs in its own subprocess (``python -m experiments.bench _case JSON``), so its
peak memory (``ru_maxrss`` of that child) is its own; a warm-up child compiles/loads the
numba kernels first, so JIT compilation is not timed.  Wall time is ``Result.time_s``
(the solve, from a loaded ``Problem``); "C++" is the authors' planner on this kind of
machine (``tests/data/reference_sample.jsonl`` README figures), and "speed-up" is
C++ time / our time.

Cases:

* bert: BERT-32 N=512 k=512 (C++ 6.5 s) and k=2048 (26.6 s), BERT-32 N=1920 k=2048
  (126.8 s), BERT-48 N=1920 k=2048 (251.2 s); memory 80e9 B and bandwidth 25e9 B/s
  (the file's values), greedy and exact knapsack, optimum at k only (no curve).
* resnet: the paper's 25 (k, memory GiB) pairs, bandwidth 25 GiB/s, N = 7680 (file).
* gnmt: GNMT N = 256 (file), bandwidth 25 GiB/s, k in --gnmt-ks with one of the
  paper's memory sizes per k (8: 1.2, 16: 1.2, 32: 0.8, 64: 0.3 GiB); exact (table
  engine, bounded by the linearized DP) and the linearized DP alone.

The machine is shared: times are noisy; the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GIB = 2**30
ROOT = Path(__file__).resolve().parent
WORKLOADS = ROOT / "workloads"

#: (transformer layers, N, k, C++ wall seconds) of the speed goals
BERT_CASES = ((32, 512, 512, 6.5), (32, 512, 2048, 26.6), (32, 1920, 2048, 126.8), (48, 1920, 2048, 251.2))
RESNET_PAIRS = ((8, 4), (8, 8), (8, 16), (16, 1.5), (16, 2), (16, 4), (16, 8), (16, 16), (32, 1.5), (32, 2),
                (32, 4), (32, 8), (32, 16), (64, 1), (64, 1.5), (64, 2), (64, 4), (64, 8), (64, 16), (128, 1),
                (128, 1.5), (128, 2), (128, 4), (128, 8), (128, 16))
#: GNMT memory (GiB) per k: one of the paper's (k, memory) pairs for each k
GNMT_MEMORY = {8: 1.2, 16: 1.2, 32: 0.8, 64: 0.3}
#: C++ figures quoted in the reference README for ResNet / GNMT
RESNET_CPP = {(16, 2.0): 9.1, (64, 4.0): 18.6, (16, 16.0): 15.0}


def _problem(spec: dict[str, Any]):
    from piper.problem import insert_bert_layers, load_problem

    p = load_problem(WORKLOADS / spec["file"])
    if spec.get("layers") and spec["layers"] != 32:
        p = insert_bert_layers(p, spec["layers"])
    return p.with_cluster(devices=spec.get("k"), memory=spec.get("memory"), microbatches=spec.get("N"),
                          bandwidth=spec.get("bandwidth"))


def run_case(spec: dict[str, Any]) -> dict[str, Any]:
    """Solve one case in this process; the result row (with this process's peak RSS)."""
    import resource

    from piper.dp import solve_dp
    from piper.options import Options

    _warm_in_process(spec["mode"])
    problem = _problem(spec)
    opts = Options(knapsack=spec["mode"], linearize=spec.get("linearize", False),
                   params={"curve": spec.get("curve", False)}, time_limit_s=spec.get("time_limit"))
    c0 = time.process_time()
    res = solve_dp(problem, opts)
    cpu_s = time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {**spec, "tps": None if res.plan is None else res.tps, "status": str(res.status), "time_s": res.time_s,
            "cpu_s": cpu_s, "rss_mb": rss_mb, "engine": res.stats.get("engine"), "ideals": res.stats.get("ideals"),
            "message": res.message}


def _warm_in_process(mode: str) -> None:
    """Load (or compile) the kernels in this process before timing anything."""
    from experiments.instances import random_problem
    from piper.dp import solve_dp
    from piper.options import Options

    p = random_problem(3, n=6, degrees=(1, 2))
    for engine in ("table", "threshold"):
        for lin in (False, True):
            solve_dp(p, Options(knapsack=mode, linearize=lin, params={"engine": engine}))


def _child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "experiments.bench", "_case", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT.parent)
    except subprocess.TimeoutExpired:
        return {**spec, "tps": None, "status": "timeout", "time_s": time.perf_counter() - t0, "rss_mb": None,
                "message": f"killed after {timeout} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {**spec, "tps": None, "status": "error", "time_s": time.perf_counter() - t0, "rss_mb": None,
                "message": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def _warm_up() -> None:
    """Compile / load every kernel once (a tiny instance, both knapsacks and both engines)."""
    code = ("from experiments.instances import random_problem; from piper.dp import solve_dp; "
            "from piper.options import Options; p = random_problem(3, n=6, degrees=(1, 2));"
            "[solve_dp(p, Options(knapsack=m, params={'engine': e})) for m in ('exact', 'greedy') "
            "for e in ('table', 'threshold')]")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, check=False)


def _cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    modes = args.modes.split(",")
    which = args.cases.split(",")
    out: list[dict[str, Any]] = []
    bert = BERT_CASES[:1] if args.quick else BERT_CASES
    if "bert" in which:
        for layers, n_mb, k, cpp in bert:
            for mode in modes:
                out.append({"case": f"BERT-{layers} N={n_mb} k={k}", "file": "bert32a100.json", "layers": layers,
                            "N": n_mb, "k": k, "mode": mode, "cpp_s": cpp})
    if "resnet" in which:
        pairs = ((16, 2),) if args.quick else RESNET_PAIRS
        for k, mem in pairs:
            for mode in modes:
                out.append({"case": f"ResNet-50 k={k} M={mem} GiB", "file": "resnet.json", "k": k,
                            "memory": mem * GIB, "bandwidth": 25 * GIB, "mode": mode,
                            "cpp_s": RESNET_CPP.get((k, float(mem)))})
    if "gnmt" in which:
        ks = [8] if args.quick else [int(x) for x in args.gnmt_ks.split(",")]
        for k in ks:
            mem = GNMT_MEMORY.get(k, 1.2)
            out.append({"case": f"GNMT k={k} M={mem} GiB linearized", "file": "gnmt.json", "k": k,
                        "memory": mem * GIB, "bandwidth": 25 * GIB, "mode": "exact", "linearize": True})
            if not args.quick:
                out.append({"case": f"GNMT k={k} M={mem} GiB", "file": "gnmt.json", "k": k, "memory": mem * GIB,
                            "bandwidth": 25 * GIB, "mode": "exact", "time_limit": args.timeout - 30})
    return out


def _fmt(x: Any, spec: str = ".3f") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    head = f"{'case':34} {'mode':6} {'engine':9} {'TPS':>14} {'status':10} {'ours s':>8} {'cpu s':>7} " \
           f"{'C++ s':>7} {'speed-up':>8} {'peak MB':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        cpp = r.get("cpp_s")
        ratio = cpp / r["time_s"] if cpp and r.get("time_s") and r["status"] not in ("timeout", "error") else None
        print(f"{r['case']:34} {r['mode']:6} {_fmt(r.get('engine')):9} {_fmt(r.get('tps'), '.10g'):>14} "
              f"{r['status']:10} {r['time_s']:8.2f} {_fmt(r.get('cpu_s'), '.2f'):>7} {_fmt(cpp, '.1f'):>7} {_fmt(ratio, '.1f'):>8} "
              f"{_fmt(r.get('rss_mb'), '.0f'):>8}" + (f"  {r['message']}" if r.get("message") else ""))


def bench_dp(args: argparse.Namespace) -> int:
    _warm_up()
    rows = []
    for spec in _cases(args):
        row = _child(spec, args.timeout)
        rows.append(row)
        print(f"  {row['case']} [{row['mode']}]: {row['status']} in {row['time_s']:.2f} s", file=sys.stderr,
              flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print_table(rows)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_case":
        print(json.dumps(run_case(json.loads(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(prog="python -m experiments.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dp = sub.add_parser("dp", help="the DP on the paper's workloads (times, speed-up over C++, peak memory)")
    dp.add_argument("--quick", action="store_true", help="one case per workload")
    dp.add_argument("--cases", default="bert,resnet,gnmt", help="comma list of bert, resnet, gnmt")
    dp.add_argument("--modes", default="greedy,exact", help="knapsack modes for bert/resnet")
    dp.add_argument("--gnmt-ks", default="8,16,32,64", help="device counts for GNMT")
    dp.add_argument("--timeout", type=float, default=900.0, help="seconds per case (child killed after)")
    dp.add_argument("--out", default=None, help="append each row to this JSONL file")
    args = parser.parse_args(argv)
    if args.command == "dp":
        return bench_dp(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
