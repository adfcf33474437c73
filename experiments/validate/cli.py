"""The command line of ``python -m experiments.validate`` (see the package docstring)."""

from __future__ import annotations

import json
import sys

from experiments import validate  # its docstring describes the command
from experiments.lib import flags
from experiments.validate.experiment import run
from experiments.validate.report import markdown, write_csv, write_png
from piper.cli.common import ArgumentParser, UsageError, run_main
from piper.core.json_values import jsonable

PROG = "python -m experiments.validate"
#: the tables --planner compares on
PLANNER_TABLES = ("sc21", "published")
#: the rows --rows accepts (SC'21 Table 1's model names)
ROW_NAMES = ("megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18b", "megatron-39b", "megatron-76b",
             "megatron-145b", "megatron-310b", "megatron-530b", "megatron-1t")


def build_parser(prog: str = PROG) -> ArgumentParser:
    ap = flags.make_parser(prog, validate.__doc__)
    flags.add_out(ap, "out/validate", "validation.csv, validation.png and VALIDATION.md")
    ap.add_argument("--quick", action="store_true", help="only the 3 smallest rows of each Megatron table")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits (in-sample errors only)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables (no progress)")
    ap.add_argument("--planner", action="store_true",
                    help="instead: the planner's best uniform plan against the layout each row ran (the catalog's "
                         "constants; written to --out: planner.csv, planner.json, PLANNER.md)")
    ap.add_argument("--table", choices=PLANNER_TABLES, default=None,  # None: not given (sc21 with --planner)
                    help="with --planner: sc21 (Megatron's SC'21 Table 1, the default) or published (the "
                         "Megatron-LM README's H100 rows, Llama 3 405B's three rows, context parallelism "
                         "included, and the latest release of each Megatron-Bridge MoE layout; about 5 minutes)")
    ap.add_argument("--rows", type=flags.name_list(ROW_NAMES, "row"), metavar="NAME[,NAME...]",
                    help="only these rows (--planner --table sc21)")
    flags.add_time_limit(ap, None, "each fit of the constants (the best so far when it runs out)")
    flags.add_quiet(ap)
    flags.add_jobs(ap, 1, "the rows run one after the other")
    return ap


def _main(argv: list[str] | None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    log = None if args.json or args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.table is not None and not args.planner:  # any value: without --planner nothing reads it
        raise UsageError(f"--table {args.table} is an option of --planner (the validation itself has no table to "
                         "choose)")
    table = args.table or "sc21"
    if args.rows is not None and not (args.planner and table == "sc21"):
        raise UsageError("--rows selects SC'21 rows of --planner --table sc21")
    out = flags.out_dir(args.out)
    if args.planner:
        return _planner(args, table, out, log)
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


def _planner(args, table, out, log) -> int:
    if table == "published":
        from experiments.validate.planner_published import compare_published, published_cases, published_markdown

        rows = []
        for case in published_cases():
            rows.append(compare_published(case))
            if log:
                r = rows[-1]
                log(f"planner {case.name}: published layout {r['published_s']:.3f} s, planner {r['planner_s']:.3f} s "
                    f"({r['time_s']:.0f} s)")
        md = published_markdown(rows)
        ok = all(r["planner_no_worse"] and r["search_no_worse"] is not False for r in rows)
    else:
        from experiments.validate.planner import compare_rows, planner_markdown
        from experiments.validate.rows import sc21_cases
        from piper.frontend.hardware import hardware

        cases = [c for c in sc21_cases() if args.rows is None or c.name in args.rows]
        rows = compare_rows(cases, lambda c: hardware(c.gpu), log=log)
        md = planner_markdown(rows)
        ok = all(r["planner_no_worse"] for r in rows)
    import csv

    with open(out / "planner.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    (out / "planner.json").write_text(json.dumps(jsonable(rows), indent=1) + "\n")
    (out / "PLANNER.md").write_text(md + "\n")
    print(json.dumps(jsonable(rows)) if args.json else md)
    return 0 if ok else 1


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda a: _main(a, prog), argv, prog=prog)
