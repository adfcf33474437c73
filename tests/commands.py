"""Running the project's commands from tests: in process through each command's
``main(argv)`` (the ``cli`` fixture of tests/conftest.py), or as a real ``python -m``
process for the few tests that check the entry points themselves."""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from piper.cli.common import run_main

#: the repository root: the working directory of every command run here
ROOT = Path(__file__).resolve().parent.parent

#: ``python -m COMMAND`` -> (module, function, prog): the function takes ``argv``; with a prog
#: it is run through :func:`piper.cli.common.run_main` (as the module's ``__main__`` does),
#: without one it applies the error contract itself
ENTRY_POINTS: dict[str, tuple[str, str, str | None]] = {
    "piper": ("piper.cli.main", "main", "piper"),
    "baselines": ("baselines.__main__", "main", "baselines"),
    "experiments.compare": ("experiments.compare.cli", "cli", None),
    "experiments.bench_exact": ("experiments.bench_exact", "main", None),
    "experiments.bench_exact_workloads": ("experiments.bench_exact_workloads", "main", None),
}


class CommandRun(NamedTuple):
    """A finished command: its exit status and what it wrote (the fields of
    :class:`subprocess.CompletedProcess` that tests read, and unpackable as a triple)."""

    returncode: int
    stdout: str
    stderr: str


#: the ``cli`` fixture (tests/conftest.py): ``cli(COMMAND, *ARGV)``
RunCommand = Callable[..., CommandRun]
#: the ``compare_cli`` fixture: ``compare_cli(ARGS)``, ``python -m experiments.compare ARGS --no-plots``
RunCompare = Callable[[list[str]], CommandRun]
#: the ``compare_two`` fixture: ``compare_two(SOLVERS, *FLAGS)``, ``experiments.compare`` with fake
#: solvers on the two-layer workload: exit status, stdout, stderr and the report's folder
RunFakes = Callable[..., tuple[int, str, str, Path]]


def call_entry_point(command: str, argv: Sequence[str]) -> int:
    """Run ``python -m COMMAND ARGV...`` in this process, from the repository root, and
    return its exit status (a ``SystemExit``, such as argparse's ``--help``, included)."""
    module, function, prog = ENTRY_POINTS[command]
    entry = getattr(importlib.import_module(module), function)
    try:
        with contextlib.chdir(ROOT):
            return entry(list(argv)) if prog is None else run_main(entry, list(argv), prog=prog)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # as the interpreter does for a non-integer exit code
        return 1


def run_python_module(module: str, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS...`` as a separate process, from the repository root."""
    return subprocess.run([sys.executable, "-m", module, *args], check=False, capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout_s)
