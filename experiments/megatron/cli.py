"""The command line of ``python -m experiments.megatron`` (see the package docstring)."""

from __future__ import annotations

import json
import sys

from experiments import megatron  # its docstring describes the command
from experiments.lib import flags
from experiments.megatron.data import load_llama3, load_table1
from experiments.megatron.experiment import run
from experiments.megatron.model import CALIBRATION_ROW
from experiments.megatron.report import markdown, write_csv, write_png
from piper.cli.common import ArgumentParser, run_main
from piper.core.errors import UsageError
from piper.core.json_values import jsonable

#: solve time limit per planner call, seconds
DEFAULT_TIME_LIMIT_S = 30.0
QUICK_ROWS = 3


PROG = "python -m experiments.megatron"


def build_parser() -> ArgumentParser:
    ap = flags.make_parser(PROG, megatron.__doc__)
    flags.add_out(ap, "out/megatron", "megatron.csv, megatron.png and MEGATRON.md")
    ap.add_argument("--quick", action="store_true", help=f"only the {QUICK_ROWS} smallest rows (and no Llama 3 planner)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables (no progress)")
    flags.add_time_limit(ap, DEFAULT_TIME_LIMIT_S, "one DP solve (two solves per row)")
    ap.add_argument("--no-planner", action="store_true", help="skip the DP (sections 1, 2 and 4 only)")
    ap.add_argument("--calibrate-on", default=CALIBRATION_ROW, metavar="MODEL",
                    help=f"the row of [SC21] Table 1 to calibrate the efficiency on (default {CALIBRATION_ROW})")
    flags.add_quiet(ap)
    flags.add_jobs(ap, 1, "the rows run one after the other")
    return ap


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    table = load_table1()
    by_name = {r.model: r for r in table}
    if args.calibrate_on not in by_name:
        raise UsageError(f"--calibrate-on: unknown row {args.calibrate_on!r}; rows: {', '.join(by_name)}")
    rows = sorted(table, key=lambda r: r.params_billion)[:QUICK_ROWS] if args.quick else table
    llama = [r for r in load_llama3() if int(r["gpus"]) == 16384 and int(r["context_parallel"]) == 1]
    log = None if args.json or args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = flags.out_dir(args.out)
    res = run(rows, by_name[args.calibrate_on], not args.no_planner, args.time_limit, llama, log=log,
              llama_planner=not args.no_planner and not args.quick)
    write_csv(res, out / "megatron.csv")
    write_png(res, out / "megatron.png")
    md = markdown(res)
    (out / "MEGATRON.md").write_text(md + "\n")
    if args.json:
        print(json.dumps(jsonable(res)))
    else:
        print(md)
        print(f"wrote {out / 'megatron.csv'}, {out / 'megatron.png'}, {out / 'MEGATRON.md'} "
              f"({res['elapsed_s']:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(_main, argv, prog=PROG)
