"""The parser of ``python -m piper info|evaluate|solve|model|plan|export|show ...`` and the dispatch to
each subcommand's module (:mod:`piper.cli.common`).

User errors (bad file, bad JSON, invalid problem or plan, bad flag) exit with
status 2 and a one-line message on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence

from piper.cli.common import ArgumentParser
from piper.cli.evaluate import add_evaluate_parser, cmd_evaluate
from piper.cli.info import add_info_parser, cmd_info
from piper.cli.solve import add_solve_args
from piper.cli.solve import cmd_solve as run_solve


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m piper", description="Piper: plan data / pipeline / tensor parallelism for DNN training.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    add_info_parser(sub)
    add_evaluate_parser(sub)

    so = sub.add_parser("solve", help="find the best plan (Piper's DP by default; any registered solver)")
    add_solve_args(so, default_solver="dp")
    from piper.cli.model import add_model_parser
    from piper.cli.plan import add_plan_parser

    add_model_parser(sub)
    add_plan_parser(sub)
    from piper.cli.show import add_show_parser

    add_show_parser(sub)
    from piper.cli.export import add_export_parser

    add_export_parser(sub)
    return p


def cmd_solve(args) -> int:
    return run_solve(args, prog="piper")


def cmd_plan(args) -> int:
    from piper.cli.plan import cmd_plan as run

    return run(args)


def cmd_model(args) -> int:
    from piper.cli.model import cmd_model as run

    return run(args)


def cmd_export(args) -> int:
    from piper.cli.export import cmd_export as run

    return run(args)


def cmd_show(args) -> int:
    from piper.cli.show import cmd_show as run

    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return {"info": cmd_info, "evaluate": cmd_evaluate, "solve": cmd_solve, "model": cmd_model, "plan": cmd_plan,
            "export": cmd_export, "show": cmd_show}[args.command](args)

