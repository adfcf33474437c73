"""Shared command-line plumbing: size parsing, cluster overrides, ablation flags,
and the error contract (user errors -> one line on stderr, exit status 2, no traceback)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from piper.core import stopping
from piper.core.errors import USER_ERRORS, UsageError
from piper.core.options import NO_AR, OBJECTIVES, SCHEDULE_CHOICES, TPS, Options
from piper.core.plan import Plan
from piper.core.problem import ACTIVATION_RECOMP, Problem
from piper.io.provenance import plan_document
from piper.io.workload import load_problem

__all__ = [
    "UsageError",
    "ArgumentParser",
    "parse_size",
    "add_cluster_args",
    "apply_cluster_args",
    "add_strict_arg",
    "problem_warnings",
    "load_workload",
    "add_ablation_args",
    "options_from_args",
    "add_objective_args",
    "run_main",
    "USER_ERRORS",
    "stdout_to_stderr",
    "check_writable",
    "write_plan",
]




class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors raise :class:`UsageError` (one line, exit 2 via :func:`run_main`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*(?:/\s*s)?\s*$")


def parse_size(text: str) -> float:
    """Bytes (or bytes/second) from '8GiB', '25 GiB/s', '80e9', '1.5GB', '512MiB', '1024'.

    Decimal units KB/MB/GB/TB are powers of 1000, binary KiB/MiB/GiB/TiB powers of 1024.
    """
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"bad size {text!r}: expected a number with an optional unit B, KB, MB, GB, KiB, MiB, GiB")
    value, unit = float(m.group(1)), m.group(2).lower()
    if unit not in _UNITS:
        raise UsageError(f"bad size {text!r}: unknown unit {m.group(2)!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    out = value * _UNITS[unit]
    if out <= 0:
        raise UsageError(f"bad size {text!r}: must be > 0")
    return out


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _size_arg(text: str) -> float:
    try:
        return parse_size(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return value


positive_int = _positive_int
size_arg = _size_arg
seconds_arg = _seconds


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """--devices, --memory, --microbatches, --bandwidth, and the version-2 --devices-per-node,
    --intra-node-bandwidth, --allreduce-factor: each overrides the file's value."""
    g = parser.add_argument_group("cluster overrides (default: the file's values)")
    g.add_argument("--devices", "-k", type=_positive_int, metavar="K", help="number of accelerators k")
    g.add_argument("--memory", "-M", type=_size_arg, metavar="SIZE", help="memory per device, e.g. 8GiB or 80e9 (bytes)")
    g.add_argument("--microbatches", "-N", type=_positive_int, metavar="N", help="microbatches per batch")
    g.add_argument("--bandwidth", "-B", type=_size_arg, metavar="SIZE",
                   help="bytes/second per device, e.g. 25GiB (between nodes when --devices-per-node is set)")
    g.add_argument("--devices-per-node", "-G", type=_positive_int, metavar="G",
                   help="devices in one node, G (file key devicesPerNode; default k: one node)")
    g.add_argument("--intra-node-bandwidth", type=_size_arg, metavar="SIZE",
                   help="bytes/second per device inside a node, e.g. 300GB (file key intraNodeBandwidth; default B)")
    g.add_argument("--allreduce-factor", type=_positive_float, metavar="F",
                   help="bytes moved per weight byte in the data-parallel resync (file key allReduceFactor; default 4)")


def apply_cluster_args(problem: Problem, args: argparse.Namespace) -> Problem:
    return problem.with_cluster(
        devices=getattr(args, "devices", None),
        memory=getattr(args, "memory", None),
        microbatches=getattr(args, "microbatches", None),
        bandwidth=getattr(args, "bandwidth", None),
        devices_per_node=getattr(args, "devices_per_node", None),
        intra_node_bandwidth=getattr(args, "intra_node_bandwidth", None),
        allreduce_factor=getattr(args, "allreduce_factor", None),
    )


def add_strict_arg(parser: argparse.ArgumentParser, *, plan: bool = False) -> None:
    """--strict: unknown keys in the workload are errors (exit 2) instead of warnings; with
    ``plan=True`` also a plan whose record (``madeFor``) differs from the workload and cluster
    given (:mod:`piper.io.provenance`)."""
    help_text = "unknown keys in the workload file are errors, not warnings"
    if plan:
        help_text = ("refuse, instead of warning about, unknown keys in the workload and a plan made for "
                     "another workload or cluster (its madeFor record)")
    parser.add_argument("--strict", action="store_true", help=help_text)


def problem_warnings(problem: Problem) -> list[str]:
    """One line each: the loader's unknown keys, and an intra-node bandwidth below the network's."""
    out = [f"warning: {msg}" for msg in problem.unknown_keys]
    if problem.intra_node_bandwidth is not None and problem.intra_node_bandwidth < problem.bandwidth:
        out.append(
            f"warning: intraNodeBandwidth {problem.intra_node_bandwidth:.6g} bytes/s is below bandwidth "
            f"{problem.bandwidth:.6g} bytes/s (inside a node is usually faster)"
        )
    return out


def load_workload(path: str, args: argparse.Namespace, prog: str = "piper") -> Problem:
    """Load a workload file for a command: --strict (if the parser has it) makes unknown keys
    errors, the cluster flags are applied, and each warning is one line on stderr."""
    problem = apply_cluster_args(load_problem(path, strict=bool(getattr(args, "strict", False))), args)
    for line in problem_warnings(problem):
        print(f"{prog}: {line}", file=sys.stderr)
    return problem


def add_ablation_args(parser: argparse.ArgumentParser) -> None:
    """--no-dp, --no-tp, --no-ar, --exclude-tmpc ID (repeatable), --uniform, --time-limit, --threads."""
    g = parser.add_argument_group("ablations and limits")
    g.add_argument("--no-dp", action="store_true", help="no data parallelism (every d = 1)")
    g.add_argument("--no-tp", action="store_true", help="no tensor parallelism (every t = 1)")
    g.add_argument("--no-ar", action="store_true", help=f"no activation recomputation (exclude TMPC {ACTIVATION_RECOMP!r})")
    g.add_argument("--exclude-tmpc", action="append", default=[], metavar="ID", help="exclude TMPCs with this id (repeatable)")
    g.add_argument("--uniform", action="store_true",
                   help="uniform plans only: every stage has the same (d, t) (docs/problem.md section 2.5)")
    g.add_argument("--time-limit", type=_seconds, metavar="SECONDS", help="solver time limit, seconds")
    g.add_argument("--threads", type=_positive_int, default=2, metavar="N", help="solver threads (default 2)")


def add_objective_args(parser: argparse.ArgumentParser, *, objective: str = TPS, max_virtual_stages: int = 1) -> None:
    """--objective, --schedule, --max-virtual-stages (docs/problem.md §9), with the command's defaults."""
    g = parser.add_argument_group("objective and schedule")
    g.add_argument("--objective", choices=OBJECTIVES, default=objective,
                   help=f"what to minimize: tps (time per sample, the steady state) or batch-time (one iteration, "
                        f"with the pipeline's fill and drain); default {objective}")
    g.add_argument("--schedule", choices=SCHEDULE_CHOICES, default="any",
                   help="the pipeline schedules a plan may use: 1f1b, interleaved (Megatron-LM's interleaved 1F1B) "
                        "or any (default; interleaved only with --max-virtual-stages >= 2)")
    g.add_argument("--max-virtual-stages", type=_positive_int, default=max_virtual_stages, metavar="V",
                   help=f"the most chunks per device group of an interleaved plan (1: 1F1B only; default {max_virtual_stages})")


def options_from_args(args: argparse.Namespace, **overrides: Any) -> Options:
    exclude = set(getattr(args, "exclude_tmpc", []) or [])
    if getattr(args, "no_ar", False):
        exclude |= NO_AR
    fields: dict[str, Any] = dict(
        data_parallel=not getattr(args, "no_dp", False),
        tensor_parallel=not getattr(args, "no_tp", False),
        exclude_tmpcs=frozenset(exclude),
        uniform=bool(getattr(args, "uniform", False)),
        time_limit_s=getattr(args, "time_limit", None),
        threads=getattr(args, "threads", 2) or 2,
    )
    for name in ("objective", "schedule", "max_virtual_stages"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    fields.update(overrides)
    return Options(**fields)


def run_main(func: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None, prog: str = "piper") -> int:
    """Run a CLI entry point with the error contract: user errors -> one line, exit 2;
    SIGINT (Ctrl-C) and SIGTERM -> one line, exit 130 / 143, for every command
    (:func:`piper.core.stopping.handling`: solvers stop within 2 s, docs/errors.md)."""
    with stopping.handling(prog):
        try:
            return func(argv)
        except USER_ERRORS as exc:
            msg = str(exc).replace("\n", " ")
            print(f"{prog}: error: {msg}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, stopping.Interrupted) else (stopping.requested() or signal.SIGINT)
            note = exc.note if isinstance(exc, stopping.Interrupted) else ""
            print(f"{prog}: interrupted ({stopping.signal_name(signum)})" + (f"; {note}" if note else ""),
                  file=sys.stderr)
            return stopping.exit_code(signum)
        except BrokenPipeError:
            return 0


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 (and ``sys.stdout``) at stderr for the duration: native
    libraries that print to stdout cannot break ``--json``."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def check_writable(path: str, flag: str) -> None:
    """Fail fast (before a long solve) when ``path`` cannot be a new or replaced file:
    a :class:`UsageError` naming the flag. Writing can still fail later; see :func:`write_plan`."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")


def write_plan(path: str, plan: Plan, problem: Problem, flag: str = "--out") -> None:
    """Write ``plan`` with its ``madeFor`` record (piper.io.provenance) as JSON; a path that
    cannot be written is a :class:`UsageError` naming the flag (exit 2, one line)."""
    text = json.dumps(plan_document(plan, problem), indent=1) + "\n"
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
