"""The parser of ``python -m piper info|evaluate|solve|model|plan|score|export|show ...`` and the dispatch to
each subcommand's module (:mod:`piper.cli`).

User errors (bad file, bad JSON, invalid problem or plan, bad flag) exit with
status 2 and a one-line message on stderr.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from piper.cli.common import ArgumentParser

__all__ = ["COMMANDS", "main"]

#: the subcommands in ``--help`` order; the module ``piper.cli.NAME`` of each has
#: ``add_NAME_parser(subparsers)`` and ``cmd_NAME(args) -> exit status``
COMMANDS = ("info", "evaluate", "solve", "model", "plan", "score", "export", "show", "warmup")


def _command(name: str, what: str):
    return getattr(importlib.import_module(f"piper.cli.{name}"), f"{what}_{name}" + ("_parser" if what == "add" else ""))


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m piper", description="Piper: plan data / pipeline / tensor parallelism for DNN training.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    for name in COMMANDS:
        _command(name, "add")(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _command(args.command, "cmd")(args)
