"""Shared command-line plumbing: size parsing, cluster overrides, ablation flags,
and the error contract (user errors -> one line on stderr, exit status 2, no traceback)."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from piper.core import stopping
from piper.core.errors import USER_ERRORS, PlanFormatError, ProblemError, UsageError
from piper.core.limits import (
    MAX_COUNT,
    MAX_MAGNITUDE,
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    MAX_VIRTUAL_STAGES,
    MIN_POSITIVE,
)
from piper.core.options import NO_AR, OBJECTIVES, SCHEDULE_CHOICES, TPS, Options
from piper.core.plan import Plan
from piper.core.problem import ACTIVATION_RECOMP, Problem
from piper.io.jsonfile import read_json
from piper.io.plans import load_plan
from piper.io.provenance import check_plan_record, plan_document
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
    "load_saved_plan",
    "add_ablation_args",
    "options_from_args",
    "add_objective_args",
    "run_main",
    "USER_ERRORS",
    "stdout_to_stderr",
    "check_writable",
    "check_outputs",
    "check_excluded_tmpcs",
    "check_virtual_stages",
    "did_you_mean",
    "PICTURE_FORMATS",
    "bounded_int",
    "positive_int",
    "rate_arg",
    "size_arg",
    "seconds_arg",
    "seconds_or_zero_arg",
    "threads_arg",
    "seed_arg",
    "float_arg",
    "nonnegative_float",
    "write_plan",
]




class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors raise :class:`UsageError` (one line, exit 2 via :func:`run_main`).

    A word that starts with a minus and a digit (``-1GB``, ``-5``, ``-.5``) is a value, never
    a flag: ``-M -1GB`` reaches the size parser, which says "must be > 0" (plain argparse
    takes ``-1GB`` for an unknown flag and says "expected one argument")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?[0-9]")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to ``word``, or ``""``."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).strip().lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


#: byte units (the prefix in any case; the B itself must be a capital: a lowercase b is bits)
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
_UNIT_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
_SIZE = re.compile(r"^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*(/\s*s)?\s*$")


def parse_size(text: str, *, zero: bool = False, rate: bool | None = None) -> float:
    """Bytes (or bytes/second) from '8GiB', '25 GiB/s', '80e9', '1.5GB', '512MiB', '1024'.

    Decimal units KB/MB/GB/TB are powers of 1000, binary KiB/MiB/GiB/TiB powers of 1024; the prefix
    may be written in either case, the B must be a capital (a lowercase b, as in '200Gb/s', is bits:
    refused with the bytes it would be). ``rate``: True, a rate (a '/s' after the unit is allowed);
    False, a size ('/s' refused); None, either. The result is in [MIN_POSITIVE, MAX_MAGNITUDE]
    (1e-30 .. 1e30, docs/errors.md); anything else, a negative or zero size included, is a
    :class:`UsageError` that says why. With ``zero`` a size of 0 in any unit ("0", "0GB", "0.0 GiB";
    not "-0") is 0.0.
    """
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"bad size {text!r}: expected a number with an optional unit {_UNIT_NAMES}")
    value, unit = float(m.group(1)), m.group(2)
    if unit.lower() not in _UNITS:
        raise UsageError(f"bad size {text!r}: unknown unit {unit!r} (use {_UNIT_NAMES})")
    if unit.endswith("b"):
        prefix = unit[:-1]
        as_bytes = f"{value / 8:g}{prefix[:1].upper()}{prefix[1:].lower()}B" + ("/s" if m.group(3) else "")
        raise UsageError(f"bad size {text!r}: a lowercase b means bits and piper reads bytes (B): "
                         f"{text.strip()} is {as_bytes}")
    if m.group(3) and rate is False:
        raise UsageError(f"bad size {text!r}: a size, not a rate: drop the '/s'")
    if m.group(1).startswith("-") and value == 0:
        raise UsageError(f"bad size {text!r}: a size takes no minus sign")
    out = value * _UNITS[unit.lower()]
    if zero and out == 0:
        return 0.0
    if not out > 0:
        raise UsageError(f"bad size {text!r}: must be {'0 or more' if zero else '> 0'}")
    if not MIN_POSITIVE <= out <= MAX_MAGNITUDE:
        raise UsageError(f"bad size {text!r}: must be between {MIN_POSITIVE:g} and {MAX_MAGNITUDE:g} bytes")
    return out


def bounded_int(low: int, high: int, what: str = "") -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``low..high`` (written in decimal digits)."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", str(text)):
            raise argparse.ArgumentTypeError(f"expected a whole number, got {str(text)[:60]!r}")
        digits = len(str(text).strip().lstrip("+-"))
        if digits > 40:
            raise argparse.ArgumentTypeError(f"must be {'>=' if str(text).strip().startswith('-') else '<='} "
                                             f"{low if str(text).strip().startswith('-') else high}{what}, "
                                             f"got a number of {digits} digits")
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}{what}, got {value}")
        return value

    parse.__name__ = "whole number"
    return parse


#: counts: k, N, G, --threads' ... (1..2^31 - 1, docs/errors.md)
_positive_int = bounded_int(1, MAX_COUNT)


def _size_arg(text: str, *, zero: bool = False) -> float:
    """An argparse ``type``: bytes, a size (no '/s'; :func:`parse_size`)."""
    try:
        return parse_size(text, zero=zero, rate=False)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rate_arg(text: str) -> float:
    """An argparse ``type``: bytes per second (an optional '/s'; :func:`parse_size`)."""
    try:
        return parse_size(text, rate=True)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str, *, zero: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {str(text)[:60]!r}") from None
    if math.isinf(value) and value > 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds (at most {MAX_SECONDS:g}), got {text!r}; "
                                         + ("0 means none" if zero else "leave the flag out for no limit"))
    if not (value >= 0 if zero else value > 0):
        raise argparse.ArgumentTypeError(f"must be {'>= 0' if zero else '> 0'} seconds, got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:g} seconds, got {text!r}")
    return value


def seconds_or_zero_arg(text: str) -> float:
    """Seconds >= 0 (0: none), finite, at most :data:`~piper.core.limits.MAX_SECONDS`."""
    return _seconds(text, zero=True)


positive_int = _positive_int
size_arg = _size_arg
rate_arg = _rate_arg
seconds_arg = _seconds
#: --threads: 1..MAX_THREADS
threads_arg = bounded_int(1, MAX_THREADS, " threads")
#: --seed: 0..2^31 - 1 (CP-SAT's and HiGHS' seeds are 32-bit)
seed_arg = bounded_int(0, MAX_SEED)


def float_arg(expected: str, *checks: tuple[Callable[[float], bool], str],
              clip: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for a float: text that is no number is "expected <expected>, got
    '...'" (the text cut to 60 characters when ``clip``); then each ``(ok, message)`` check in
    turn rejects a value ``ok`` refuses with "<message>, got '...'"."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            shown = str(text)[:60] if clip else text
            raise argparse.ArgumentTypeError(f"expected {expected}, got {shown!r}") from None
        for ok, message in checks:
            if not ok(value):
                raise argparse.ArgumentTypeError(f"{message}, got {text!r}")
        return value

    return parse


_positive_float = float_arg(
    "a number",
    (lambda v: v > 0 and math.isfinite(v), "must be a finite number > 0"),
    (lambda v: MIN_POSITIVE <= v <= MAX_MAGNITUDE, f"must be between {MIN_POSITIVE:g} and {MAX_MAGNITUDE:g}"),
    clip=True)
#: a finite number >= 0 (an argparse ``type``)
nonnegative_float = float_arg("a number", (lambda v: v >= 0 and math.isfinite(v), "must be a finite number >= 0"),
                              clip=True)


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """--devices, --memory, --microbatches, --bandwidth, and the version-2 --devices-per-node,
    --intra-node-bandwidth, --allreduce-factor: each overrides the file's value."""
    g = parser.add_argument_group("cluster overrides (default: the file's values)")
    g.add_argument("--devices", "-k", type=_positive_int, metavar="K", help="number of accelerators k")
    g.add_argument("--memory", "-M", type=_size_arg, metavar="SIZE", help="memory per device, e.g. 8GiB or 80e9 (bytes)")
    g.add_argument("--microbatches", "-N", type=_positive_int, metavar="N", help="microbatches per batch")
    g.add_argument("--bandwidth", "-B", type=_rate_arg, metavar="RATE",
                   help="bytes/second per device, e.g. 25GiB (between nodes when --devices-per-node is set)")
    g.add_argument("--devices-per-node", "-G", type=_positive_int, metavar="G",
                   help="devices in one node, G (file key devicesPerNode; default k: one node)")
    g.add_argument("--intra-node-bandwidth", type=_rate_arg, metavar="RATE",
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


def load_workload(path: str, args: argparse.Namespace, prog: str = "piper", *, check_model: bool = True) -> Problem:
    """Load a workload file for a command: --strict (if the parser has it) makes unknown keys
    errors, the cluster flags are applied, ``--exclude-tmpc`` ids (if the parser has it) must
    be TMPC ids of the workload, and each warning is one line on stderr. ``check_model``: the
    workload's ``model`` record (the front end's, which only export reads) is checked as export
    checks it (:func:`piper.export.common.model_record_error`): a bad one is a warning, with
    --strict a :class:`ProblemError` (export itself refuses it, and passes False)."""
    strict = bool(getattr(args, "strict", False))
    problem = apply_cluster_args(load_problem(path, strict=strict), args)
    check_excluded_tmpcs([problem], getattr(args, "exclude_tmpc", None) or ())
    for line in problem_warnings(problem):
        print(f"{prog}: {line}", file=sys.stderr)
    if check_model:
        from piper.export.common import model_record_error

        bad = model_record_error(problem)
        if bad is not None and strict:
            raise ProblemError(f"{path}: {bad}")
        if bad is not None:
            print(f"{prog}: warning: {bad} (only export reads the record, and refuses it)", file=sys.stderr)
    return problem


def load_saved_plan(path: str, problem: Problem, *, strict: bool, prog: str = "piper", flag: str = "") -> Plan:
    """``load_plan(path)``, the plan to use with ``problem``: each difference between the plan's
    ``madeFor`` record and ``problem`` is one warning line on stderr (``strict``: a
    :class:`~piper.core.errors.PlanRecordMismatch` instead; :func:`piper.io.provenance.check_plan_record`),
    after ``flag`` (e.g. ``--warm-start``) when given."""
    doc = read_json(path, PlanFormatError, "plan")  # read once: a pipe (<(...)) gives its text once
    plan = load_plan(doc)
    for line in check_plan_record(doc, problem, strict=strict, name=str(path)):
        print(f"{prog}: warning: {flag + ' ' if flag else ''}{line}", file=sys.stderr)
    return plan


def check_excluded_tmpcs(problems: Sequence[Problem], ids: Iterable[str]) -> None:
    """``--exclude-tmpc`` ids that no TMPC of any of ``problems`` has are a :class:`UsageError`
    naming the unknown id and the known ones (a misspelt id would exclude nothing)."""
    known = sorted({c.id for p in problems for nd in p.nodes for lst in nd.tmpcs.values() for c in lst})
    for tid in ids:
        if tid not in known:
            raise UsageError(f"--exclude-tmpc {tid!r}: no TMPC has this id{did_you_mean(tid, known)}; "
                             f"the workload's TMPC ids are {', '.join(repr(k) for k in known)}")


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
    g.add_argument("--threads", type=threads_arg, default=2, metavar="N", help=f"solver threads (default 2, at most {MAX_THREADS})")


def add_objective_args(parser: argparse.ArgumentParser, *, objective: str = TPS, max_virtual_stages: int = 1,
                       default_note: str = "") -> None:
    """--objective, --schedule, --max-virtual-stages (docs/problem.md §9), with the command's defaults."""
    g = parser.add_argument_group("objective and schedule")
    g.add_argument("--objective", choices=OBJECTIVES, default=objective,
                   help=f"what to minimize: tps (time per sample, the steady state) or batch-time (one iteration, "
                        f"with the pipeline's fill and drain); default {objective}")
    g.add_argument("--schedule", choices=SCHEDULE_CHOICES, default="any",
                   help="the pipeline schedules a plan may use: 1f1b, interleaved (Megatron-LM's interleaved 1F1B) "
                        "or any (default; interleaved only with --max-virtual-stages >= 2)")
    g.add_argument("--max-virtual-stages", type=bounded_int(1, MAX_VIRTUAL_STAGES), default=max_virtual_stages, metavar="V",
                   help=f"the most chunks per device group of an interleaved plan (1: 1F1B only; default {max_virtual_stages}"
                        f"{default_note})")


def check_virtual_stages(problem: Problem, args: argparse.Namespace) -> None:
    """``--max-virtual-stages V`` with V above the workload's layers: every chunk of an
    interleaved plan holds a layer, so such a V cannot be reached (a :class:`UsageError`)."""
    v = getattr(args, "max_virtual_stages", None)
    if v is not None and v > max(1, problem.n):
        raise UsageError(f"--max-virtual-stages {v}: more than the workload's {problem.n} layers "
                         "(each chunk of an interleaved plan holds at least one layer)")


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


#: the picture formats ``show --out`` and ``solve --png`` write (by the file's extension)
PICTURE_FORMATS = (".png", ".svg", ".pdf")


def check_writable(path: str, flag: str) -> None:
    """Fail fast (before a long solve) when ``path`` cannot be a new or replaced file:
    a :class:`UsageError` naming the flag. The test opens the file for appending (an existing
    file is not changed) or creates it and removes it again, so a directory the user may not
    write, a read-only file system or ``/proc`` is found here, not after the solve."""
    if str(path) == "":
        raise UsageError(f"{flag}: an empty path")
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    try:
        is_dir = target.is_dir()
        if is_dir or str(path).endswith(("/", os.sep)):
            raise UsageError(f"{flag} {path}: is a directory" if is_dir else
                             f"{flag} {path}: ends with '/', a directory's name, not a file's")
        if not parent.is_dir():
            raise UsageError(f"{flag} {path}: directory {str(parent)!r} does not exist")
        if _is_stdout(target):
            raise UsageError(f"{flag} {path}: is this command's standard output, where it prints its report "
                             "(--json: its JSON object); write to a file or a shell's >(...)")
        if target.exists() and not target.is_file() and not target.is_char_device() and not _held_pipe(target):
            kind = "a named pipe (FIFO)" if target.is_fifo() else "not a regular file"
            raise UsageError(f"{flag} {path}: {kind}; piper writes its output to a file "
                             "(a shell's >(...) works)")
    except OSError as exc:  # a directory on the way that cannot be searched
        raise UsageError(f"{flag} {path}: not writable ({exc.strerror or exc})") from None
    try:
        if target.exists():
            with open(target, "ab"):
                pass
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
            target.unlink()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: not writable ({exc.strerror or exc})") from None


def _is_stdout(target: Path) -> bool:
    """Whether ``target`` is the file, pipe or terminal this process prints its report to
    (``/dev/stdout``, or the file stdout is redirected into)."""
    try:
        wanted, out = target.stat(), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such path, or stdout replaced (tests capture it)
        return False
    return (wanted.st_dev, wanted.st_ino) == (out.st_dev, out.st_ino)


def _held_pipe(target: Path) -> bool:
    """Whether ``target`` is a pipe this process already holds open (a shell's ``>(...)``):
    writing to it cannot wait for a reader that never comes, unlike a named pipe nobody reads
    (which :func:`check_writable` refuses rather than hang)."""
    try:
        wanted = target.stat()
        held = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for entry in held:
        try:
            info = os.stat(f"/proc/self/fd/{entry}")
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == (wanted.st_dev, wanted.st_ino):
            return True
    return False


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs: Sequence[tuple[str, str | None]], inputs: Sequence[tuple[str, str | None]] = (),
                  formats: Mapping[str, Sequence[str]] | None = None) -> None:
    """Check every output path of a command before any work starts: each ``(flag, path)`` of
    ``outputs`` (None: not given) is not empty, has an extension of ``formats[flag]`` when
    given, is not an input of the command (``inputs``: ``(flag or "the FILE argument", path)``)
    nor another output, and can be written (:func:`check_writable`). A :class:`UsageError`
    naming the flag otherwise."""
    given = [(flag, str(path)) for flag, path in outputs if path is not None]
    for i, (flag, path) in enumerate(given):
        if path == "":
            raise UsageError(f"{flag}: an empty path")
        allowed = (formats or {}).get(flag)
        if allowed:
            suffix = Path(path).suffix.lower()
            if suffix not in allowed:
                what = f"a {suffix} file" if suffix else "a file without an extension"
                raise UsageError(f"{flag} {path}: cannot write {what}; the formats are "
                                 f"{', '.join(allowed)} (by the file's extension)")
        for in_flag, in_path in inputs:
            if in_path is not None and str(in_path) != "" and _same_file(path, str(in_path)):
                raise UsageError(f"{flag} {path} is the command's input ({in_flag} {in_path}): "
                                 "refusing to overwrite it")
        for other_flag, other in given[:i]:
            if _same_file(path, other):
                raise UsageError(f"{other_flag} and {flag} name the same file {path}")
        check_writable(path, flag)


def write_plan(path: str, plan: Plan, problem: Problem, flag: str = "--out") -> None:
    """Write ``plan`` with its ``madeFor`` record (piper.io.provenance) as JSON; a path that
    cannot be written is a :class:`UsageError` naming the flag (exit 2, one line)."""
    text = json.dumps(plan_document(plan, problem), indent=1) + "\n"
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
