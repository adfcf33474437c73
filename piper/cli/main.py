"""The parser of ``python -m piper info|evaluate|solve|model|plan|score|export|show ...`` and the dispatch to
each subcommand's module (:mod:`piper.cli`).

User errors (bad file, bad JSON, invalid problem or plan, bad flag) exit with
status 2 and a one-line message on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from piper.cli.common import ArgumentParser
from piper.core.errors import UsageError

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


#: what ``--list`` may come with: it lists, as text or (``--json``) as one object
LIST_COMPANIONS = frozenset({"command", "list", "json"})


def _check_list_alone(parser: ArgumentParser, args: argparse.Namespace, argv: Sequence[str]) -> None:
    """``--list`` lists the presets and GPUs and exits: any other argument given with it would be
    ignored, so it is refused, naming the first (:class:`UsageError`), even one given at its default.
    The subcommand's words are parsed again into a namespace holding a marker for every option, which
    argparse then leaves in place for each option not given."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    words = list(argv)[list(argv).index(args.command) + 1:]
    absent = object()
    given = argparse.Namespace()
    for action in sub._actions:
        if action.dest != argparse.SUPPRESS and action.option_strings:
            # append / extend copy what is there: they start from None
            setattr(given, action.dest, None if isinstance(action, (argparse._AppendAction, argparse._ExtendAction))
                    else absent)
    sub.parse_args(words, namespace=given)
    for action in sub._actions:
        dest = action.dest
        if dest in LIST_COMPANIONS or dest == argparse.SUPPRESS:
            continue
        value = getattr(given, dest, absent)
        named = action.option_strings and value is not absent and value is not None
        if named or (not action.option_strings and value != action.default):
            what = "/".join(action.option_strings) or f"the {action.metavar or dest} argument"
            raise UsageError(f"--list lists the presets and GPUs and takes no other argument; got {what}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(words)
    if getattr(args, "list", False):
        _check_list_alone(parser, args, words)
    return _command(args.command, "cmd")(args)
