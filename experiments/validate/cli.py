"""The command line of ``python -m experiments.validate`` (see the package docstring)."""

from __future__ import annotations

import json
import sys

from experiments import validate  # its docstring describes the command
from experiments.lib import flags
from experiments.validate.experiment import run
from experiments.validate.report import markdown, write_csv, write_png
from piper.cli.common import ArgumentParser, run_main
from piper.core.json_values import jsonable

PROG = "python -m experiments.validate"


def build_parser(prog: str = PROG) -> ArgumentParser:
    ap = flags.make_parser(prog, validate.__doc__)
    flags.add_out(ap, "out/validate", "validation.csv, validation.png and VALIDATION.md")
    ap.add_argument("--quick", action="store_true", help="only the 3 smallest rows of each Megatron table")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits (in-sample errors only)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables (no progress)")
    flags.add_time_limit(ap, None, "each fit of the constants (the best so far when it runs out)")
    flags.add_quiet(ap)
    flags.add_jobs(ap, 1, "the rows run one after the other")
    return ap


def _main(argv: list[str] | None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    log = None if args.json or args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = flags.out_dir(args.out)
    res = run(quick=args.quick, loo=not args.no_loo, log=log, time_limit_s=args.time_limit)
    write_csv(res, out / "validation.csv")
    write_png(res, out / "validation.png")
    md = markdown(res)
    (out / "VALIDATION.md").write_text(md + "\n")
    if args.json:
        print(json.dumps(jsonable(res)))
    else:
        print(md)
        print(f"wrote {out / 'validation.csv'}, {out / 'validation.png'}, {out / 'VALIDATION.md'} "
              f"({res['elapsed_s']:.0f} s)")
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda a: _main(a, prog), argv, prog=prog)
