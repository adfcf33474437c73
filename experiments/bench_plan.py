"""Wall time and peak memory of ``python -m piper plan`` (issue 29's benchmark): the whole
search a user runs (micro-batch sizes, 1F1B and interleaved schedules, the runnable uniform
plan and Piper's free plan), on the issue's two cases.

    python -m experiments.bench_plan [--cases llama3-70b,llama3-405b] [--repo DIR] [--extra "ARGS"]
        [--time-limit SECONDS] [--json]

Cases (H100 SXM 80 GB, 8 per node, sequence 8,192, the front end's defaults otherwise):

* ``llama3-70b``: 128 nodes (1,024 GPUs), global batch 1,024;
* ``llama3-405b``: 2,048 nodes (16,384 GPUs), global batch 2,048 (Llama 3's 16M tokens);
* ``llama3-8b``: 4 nodes, global batch 256: a quick case;
* ``deepseek-v3-1k``, ``deepseek-v3-2k``: DeepSeek-V3 on 128 and 256 nodes (1,024 and 2,048 GPUs),
  the front end's defaults (sequence 4,096, global batch 2,048); with ``--extra=--uniform`` the
  pruned uniform search (docs/frontend.md).

Each case runs ``python -m piper plan ... --json`` in its own child process (``--repo``: in
another checkout, e.g. an older revision for "before" figures), so its peak resident memory
(``ru_maxrss`` of the child, KiB on Linux) and CPU time are its own. The wall time includes
the interpreter's start and loading the DP's compiled kernels from numba's cache (run
``python -m piper warmup`` first: a cold cache adds the compile time). The machine is shared:
the load average is printed with the table; quote ratios measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


#: case -> the ``plan`` arguments (model and cluster)
CASES: dict[str, list[str]] = {
    "llama3-8b": ["llama3-8b", "--gpu", "h100", "--nodes", "4", "--seq", "8192", "--global-batch", "256"],
    "llama3-70b": ["llama3-70b", "--gpu", "h100", "--nodes", "128", "--seq", "8192", "--global-batch", "1024"],
    "llama3-405b": ["llama3-405b", "--gpu", "h100", "--nodes", "2048", "--seq", "8192", "--global-batch", "2048"],
    # issue 31: the MoE search over the expert-parallel size too (sequence 4,096, global batch 2,048)
    "deepseek-v3-1k": ["deepseek-v3", "--gpu", "h100", "--nodes", "128"],
    "deepseek-v3-2k": ["deepseek-v3", "--gpu", "h100", "--nodes", "256"],
}


def run_case(name: str, repo: Path, extra: list[str], time_limit_s: float | None) -> dict:
    """One ``plan`` run in a child process: wall and CPU seconds, peak RSS, the plan's figures."""
    argv = [sys.executable, "-m", "piper", "plan", *CASES[name], *extra, "--json"]
    if time_limit_s is not None:
        argv += ["--time-limit", str(time_limit_s)]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
        child = subprocess.Popen(argv, cwd=repo, env=env, stdout=out_file, stderr=err_file, text=True)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage (peak RSS, CPU)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall_s = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        stdout, stderr = out_file.read(), err_file.read()
    row = {"case": name, "exit": child.returncode, "wall_s": round(wall_s, 2),
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}
    try:
        out = json.loads(stdout)
    except json.JSONDecodeError:
        row["error"] = (stderr.strip().splitlines() or ["no output"])[-1]
        return row
    row["slowest_solve_s"] = round(max((c.get("time_s") or 0.0 for c in out.get("candidates", [])), default=0.0), 2)
    schedule = out.get("schedule") or {}
    row.update(status=out.get("status"), batch_time_s=out.get("batch_time_s"), stages=out.get("stages"),
               micro_batch=out.get("micro_batch"), schedule=schedule.get("kind", "1f1b"),
               virtual_stages=schedule.get("virtualStages", 1), exact=out.get("exact"),
               gain_of_free=out.get("gain_of_free"),
               solves=(out.get("search") or {}).get("solves", len(out.get("candidates", [])) or 1),
               pruned=(out.get("search") or {}).get("pruned_by_bound", 0))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="llama3-70b,llama3-405b", help="comma-separated, from: " + ", ".join(CASES))
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the checkout whose piper runs (default: this one)")
    ap.add_argument("--extra", default="", help="more plan arguments, one shell-quoted string")
    ap.add_argument("--time-limit", type=float, default=None, metavar="S", help="plan's --time-limit")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        print(f"bench_plan: unknown case {unknown[0]!r}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        print(f"bench_plan: {name} ...", file=sys.stderr, flush=True)
        rows.append(run_case(name, args.repo, shlex.split(args.extra), args.time_limit))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.repo, capture_output=True, text=True,
                          check=False).stdout.strip() or "unknown"
    meta = {"revision": head, "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps({**meta, "rows": rows}))
        return 0
    print(f"revision {meta['revision']}, load average {meta['load_average']}, {meta['cpus']} CPUs")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:<12} exit {r['exit']}: {r['error']} ({r['wall_s']} s)")
            continue
        print(f"{r['case']:<12} wall {r['wall_s']:>7.2f} s  cpu {r['cpu_s']:>7.2f} s  peak {r['peak_rss_mib']:>7.1f} MiB  "
              f"{r['status']}, batch {r['batch_time_s']:.4g} s, {r['stages']} stages, b={r['micro_batch']}, "
              f"{r['schedule']} v={r['virtual_stages']}, {r['solves']} solves, {r['pruned']} pruned by bound "
              f"(slowest {r['slowest_solve_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
