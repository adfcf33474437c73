"""Flags shared by every ``python -m experiments.*`` command, their value types, and what
they set up (the ``--out`` directory, the ``--quiet`` progress printer).

Every command spells its common flags the same way and they behave the same:

* ``--time-limit SECONDS``: the solver time limit of one run (a finite number > 0, at most
  1e7; ``inf`` is refused: leave the flag out);
* ``--out DIR``, ``-o DIR``: the directory the command writes its files into (created
  if missing; an unwritable one or the empty path is exit 2 with one line);
* ``--quiet``, ``-q``: no progress lines on stderr (results still go to stdout);
* ``--jobs N``, ``-j N``: runs at once. A command that times its runs (a benchmark)
  accepts only 1: parallel runs on a shared machine would distort the times;
* ``--help`` text on every flag.

Bad values are exit status 2 with one line on stderr, never a traceback: parsers are
:class:`piper.cli.common.ArgumentParser` (errors raise :class:`~piper.core.errors.UsageError`), value
types raise :class:`argparse.ArgumentTypeError`, and ``main`` runs under
:func:`piper.cli.common.run_main`. (The number types ``positive_int`` and ``seconds_arg``
are piper's, in :mod:`piper.cli.common`.)
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from piper.cli.common import ArgumentParser, positive_int, seconds_arg
from piper.core.errors import UsageError
from piper.core.limits import MAX_COUNT

__all__ = [
    "make_parser",
    "add_time_limit",
    "add_out",
    "add_quiet",
    "add_jobs",
    "int_list",
    "dir_arg",
    "name_list",
    "out_dir",
    "runs_file",
    "progress",
    "progress_line",
]


def make_parser(prog: str, doc: str | None, epilog: str | None = None) -> ArgumentParser:
    """A parser for ``python -m experiments.NAME``: its description is the first paragraph
    of ``doc`` (the module docstring); errors are exit 2 with one line."""
    description = (doc or "").strip().split("\n\n")[0] or None
    return ArgumentParser(prog=prog, description=description, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_time_limit(parser: argparse.ArgumentParser, default_s: float | None, what: str = "one solve") -> None:
    """``--time-limit SECONDS``: the time limit of ``what`` (a number > 0)."""
    default = "none" if default_s is None else f"{default_s:g}"
    parser.add_argument("--time-limit", type=seconds_arg, default=default_s, metavar="SECONDS",
                        help=f"time limit of {what}, seconds (default {default})")


def add_out(parser: argparse.ArgumentParser, default: str | Path, what: str) -> None:
    """``--out DIR`` / ``-o DIR``: the output directory; ``what`` says what is written there."""
    parser.add_argument("--out", "-o", type=dir_arg, default=Path(default), metavar="DIR",
                        help=f"output directory, created if missing: {what} (default {default})")


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """``--quiet`` / ``-q``: no progress on stderr."""
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress lines on stderr (results still go to stdout)")


def add_jobs(parser: argparse.ArgumentParser, max_jobs: int | None = None, why: str = "") -> None:
    """``--jobs N`` / ``-j N``: runs at once (default 1). With ``max_jobs`` a larger N is
    exit 2 with one line that says ``why``."""

    def jobs(text: str) -> int:
        n = positive_int(text)
        if max_jobs is not None and n > max_jobs:
            raise argparse.ArgumentTypeError(f"at most {max_jobs} for this command ({why}), got {n}")
        return n

    limit = "" if max_jobs is None else f"; at most {max_jobs}: {why}"
    parser.add_argument("--jobs", "-j", type=jobs, default=1, metavar="N", help=f"runs at once (default 1{limit})")


def dir_arg(text: str) -> Path:
    """An argparse ``type`` for a directory path: any path but the empty one (which would
    silently mean the current directory)."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError("an empty path (give a directory, e.g. '.')")
    return Path(text)


def int_list(text: str, minimum: int = 1) -> tuple[int, ...]:
    """``"8,12,16"`` -> ``(8, 12, 16)``: a comma-separated list of whole numbers >= ``minimum``
    and <= 2^31 - 1 (an argparse ``type``: a bad value is one line, exit 2)."""
    items = [x.strip() for x in str(text).split(",")]
    if not items or any(not x for x in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}")
    out = []
    for x in items:
        if not re.fullmatch(r"[-+]?[0-9]{1,40}", x):
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text[:60]!r}")
        value = int(x)
        if value > MAX_COUNT:
            raise argparse.ArgumentTypeError(f"every number must be <= {MAX_COUNT}, got {value} in {text[:60]!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"every number must be >= {minimum}, got {value} in {text!r}")
        out.append(value)
    return tuple(dict.fromkeys(out))


def name_list(known: Iterable[str], what: str = "name") -> Callable[[str], tuple[str, ...]]:
    """An argparse ``type`` for a comma-separated list of names out of ``known`` (order
    kept, duplicates dropped); an unknown name is one line listing the known ones."""
    choices = tuple(known)

    def parse(text: str) -> tuple[str, ...]:
        items = [x.strip() for x in str(text).split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}s, got {text!r}")
        bad = [x for x in items if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {what} {bad[0]!r}; known: {', '.join(choices)}")
        return tuple(dict.fromkeys(items))

    parse.__name__ = f"{what} list"  # argparse names the type in some messages
    return parse


def out_dir(path: Path) -> Path:
    """Create the output directory ``path``; a path that cannot be one is a :class:`UsageError`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {str(path)!r}: cannot create the directory ({exc.strerror or exc})") from None
    if not path.is_dir():
        raise UsageError(f"--out {str(path)!r} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out {str(path)!r}: cannot write in the directory ({exc.strerror or exc})") from None
    return path


def runs_file(out: Path, name: str = "runs.jsonl") -> Path:
    """A benchmark's runs file: ``DIR/name`` in the ``--out`` directory ``out`` (created). A path
    ending in ``.jsonl`` is taken as the runs file itself (what ``--out`` meant before it named a
    directory in every experiments command)."""
    if out.suffix == ".jsonl":
        out_dir(out.parent)
        return out
    return out_dir(out) / name


def progress_line(msg: str) -> None:
    """One progress line on stderr: ``[HH:MM:SS] msg``."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def progress(quiet: bool) -> Callable[[str], None]:
    """A progress printer: :func:`progress_line`, or nothing with ``quiet``."""

    def say(msg: str) -> None:
        if not quiet:
            progress_line(msg)

    return say
