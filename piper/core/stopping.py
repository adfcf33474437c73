"""Time limits and interrupts, shared by every solver and command (docs/errors.md, "Time
limits" and "Interrupts").

**Time limits.** A solver turns ``Options.time_limit_s`` into a deadline
(``time.perf_counter()`` seconds) when it starts and checks it between steps:
:func:`expired`, :func:`remaining`, :func:`check`. Code that builds a model row by row
calls :func:`checkpoint`, which reads the deadline of the innermost :func:`deadline_scope`
(the exact models' driver opens one), so that a build which cannot finish in time stops
with :class:`TimeLimitReached` instead of running on.

**Interrupts.** :func:`handling` (entered once per command by
:func:`piper.cli.common.run_main`) installs handlers for SIGINT and SIGTERM and a watcher
thread woken through :func:`signal.set_wakeup_fd`, so that a signal is seen even while
the main thread is inside a native solver (HiGHS, CP-SAT hold no Python frame to run a
handler in). A signal records a stop request (:func:`requested`) and then:

* while Python code runs outside a :func:`stoppable` section, the handler raises
  :class:`Interrupted` (a ``KeyboardInterrupt``) at once, as Ctrl-C always did;
* while a :func:`stoppable` section runs (a native search, a CBC subprocess, the split's
  threads), its ``cancel`` is called instead (``CpSolver.StopSearch``,
  ``Highs.cancelSolve``, SIGINT to CBC) and the handler raises nothing: the solver
  returns its best answer so far, sees :func:`requested` (or :func:`expired`) and does no
  further work, and the driver raises :class:`Interrupted` with that answer
  (``Interrupted.result``) for the command to keep (``solve --out``);
* a *polled* section (:func:`polled`: the DP, the brute force and the exact models' driver)
  is never raised into: it sees the request at its next :func:`check` / :func:`checkpoint`
  (between kernel calls, search steps, rows) and raises :class:`Interrupted` from there, with
  its best answer when it has one (a signal raised into a numba kernel's boxing crashed the
  process; into a pybind11 call it came out as a ``TypeError``);
* a section still running :data:`GRACE_S` seconds after the signal (HiGHS does not look
  at its interrupt flag everywhere, e.g. in presolve's probing), or a second signal while
  one runs, ends the process at once: its ``abandon`` is called (CBC is killed), one line
  goes to stderr and the exit status is 128 + the signal number.

The command's ``python -m`` entry point then ends with :func:`exit_promptly`: the process
exits without the interpreter's teardown. Without :func:`handling` (library use) signals keep
Python's defaults: nothing here changes what Ctrl-C does in a notebook.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GRACE_S", "SIGNALS", "TimeLimitReached", "Interrupted", "signal_name", "exit_code",
    "requested", "request_stop", "reset", "installed", "handling", "stoppable", "polled", "exit_promptly",
    "deadline_scope", "current_deadline", "expired", "remaining", "check", "checkpoint",
]

#: seconds a :func:`stoppable` section may go on after a signal before the process ends
#: without its answer (the 2 s promise of docs/errors.md, "Interrupts", less the exit)
GRACE_S = 1.5
#: the signals :func:`handling` handles
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TimeLimitReached(Exception):
    """The deadline passed before a step could finish (a model build, a second proof):
    ``where`` names the step."""

    def __init__(self, where: str = "") -> None:
        super().__init__(f"time limit reached{' while ' + where if where else ''}")
        self.where = where


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped a command. ``result``: the solver's answer when it stopped
    (a :class:`piper.core.result.Result`, its best plan "feasible", never "optimal" unless
    proven), None when there is none; ``note``: what the command did with it (one clause,
    e.g. "best plan so far written to plan.json"). A ``KeyboardInterrupt``, so code that
    handles Ctrl-C handles it too."""

    def __init__(self, signum: int = signal.SIGINT, result: Any = None, note: str = "") -> None:
        super().__init__(signal_name(signum))
        self.signum = int(signum)
        self.result = result
        self.note = note

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def signal_name(signum: int) -> str:
    """"SIGINT", "SIGTERM", ... for a signal number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code(signum: int) -> int:
    """The shell's exit status of a command ended by ``signum``: 128 + its number (130, 143)."""
    return 128 + int(signum)


# --------------------------------------------------------------------------- stop requests


@dataclass
class _Section:
    cancel: Callable[[], None]
    abandon: Callable[[], None] | None


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: the first signal received since :func:`reset` (None: no stop requested)
    signum: int | None = None
    #: a signal came while a stoppable section ran: the solver stops by itself and the
    #: handler must not raise into the code that reads its answer
    absorbed: bool = False
    sections: dict[int, _Section] = field(default_factory=dict)


_STATE = _State()
_TOKENS = itertools.count()


def requested() -> int | None:
    """The signal number of the stop requested since the command began, or None."""
    return _STATE.signum


def reset() -> None:
    """Forget a stop request (a new command, or a test, begins)."""
    with _STATE.lock:
        _STATE.signum = None
        _STATE.absorbed = False


def request_stop(signum: int = signal.SIGINT) -> bool:
    """What a signal does (module docstring): record the request and tell every running
    :func:`stoppable` section to stop. Returns True when the stop is cooperative (a
    section was running, or one already absorbed a signal): the solver returns its answer
    and nothing must be raised into it."""
    with _STATE.lock:
        if _STATE.signum is None:
            _STATE.signum = int(signum)
        sections = list(_STATE.sections.values())
        if sections:
            _STATE.absorbed = True
        cooperative = _STATE.absorbed
    for section in sections:
        with contextlib.suppress(Exception):  # a cancel that fails must not hide the others
            section.cancel()
    return cooperative


def _running_sections() -> list[_Section]:
    with _STATE.lock:
        return list(_STATE.sections.values())


@contextmanager
def stoppable(cancel: Callable[[], None], abandon: Callable[[], None] | None = None) -> Iterator[None]:
    """A section that stops by itself when asked: ``cancel()`` (called from another thread,
    once per signal) makes it return soon with its best answer; ``abandon()`` (optional)
    is called just before the process ends when it did not (e.g. kill a subprocess). A
    stop already requested when the section begins is passed on at once."""
    token = next(_TOKENS)
    with _STATE.lock:
        _STATE.sections[token] = _Section(cancel, abandon)
        pending = _STATE.signum is not None
        if pending:
            _STATE.absorbed = True
    try:
        if pending:
            cancel()
        yield
    finally:
        with _STATE.lock:
            _STATE.sections.pop(token, None)


def polled(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``func`` as a :func:`stoppable` section that stops by polling: it calls
    :func:`check` between steps, and no signal handler raises into it. For code whose
    steps call compiled kernels (the DP's numba kernels): a handler that raised while a
    kernel boxed its result (numba runs Python code there, e.g. a namedtuple's
    ``__new__``) crashed the process (SIGSEGV)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with stoppable(lambda: None):
            return func(*args, **kwargs)

    return wrapper


# --------------------------------------------------------------------------- signal handling


class _Handling:
    """The handlers, the wakeup pipe and the watcher thread of one :func:`handling`."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self.previous: dict[int, Any] = {}
        self.previous_fd = -1
        self.thread = threading.Thread(target=self._watch, name="piper-signal-watcher", daemon=True)

    def install(self) -> None:
        self.thread.start()
        self.previous_fd = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for signum in SIGNALS:
            self.previous[signum] = signal.signal(signum, _on_signal)

    def uninstall(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self.previous_fd)
        with contextlib.suppress(OSError):
            os.write(self.write_fd, b"\0")  # the watcher's stop byte
        self.thread.join(timeout=2.0)
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _watch(self) -> None:
        """Wake on each signal (its number is written to the pipe even while the main thread
        runs native code), pass it on, and end the process when a section does not stop."""
        count = 0
        hard_at: float | None = None
        last = signal.SIGINT
        while True:
            timeout = None if hard_at is None else max(0.0, hard_at - time.monotonic())
            try:
                ready, _, _ = select.select([self.read_fd], [], [], timeout)
            except (OSError, ValueError):
                return
            if ready:
                try:
                    data = os.read(self.read_fd, 64)
                except OSError:
                    return
                for byte in data:
                    if byte == 0:
                        return
                    if byte not in SIGNALS:
                        continue
                    count += 1
                    last = byte
                    request_stop(byte)
                    if _running_sections():
                        if count >= 2:
                            self._hard_exit(byte, "a second signal came while the solver was stopping")
                        if hard_at is None:
                            hard_at = time.monotonic() + GRACE_S
            elif hard_at is not None and time.monotonic() >= hard_at:
                hard_at = None
                if _running_sections():
                    self._hard_exit(last, f"the solver did not stop within {GRACE_S:g} s")

    def _hard_exit(self, signum: int, why: str) -> None:
        for section in _running_sections():
            if section.abandon is not None:
                with contextlib.suppress(Exception):
                    section.abandon()
        line = f"{self.prog}: interrupted ({signal_name(signum)}): {why}; exiting without its answer\n"
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        try:
            os.write(2, line.encode(errors="replace"))
        finally:
            os._exit(exit_code(signum))


_HANDLING: _Handling | None = None


def _on_signal(signum: int, frame: Any) -> None:
    """The Python-level handler (main thread): raise unless a section stops by itself."""
    if not request_stop(signum):
        raise Interrupted(signum)


def installed() -> bool:
    """True inside :func:`handling` (a command's run): solvers then leave SIGINT to it
    (CP-SAT's own SIGINT handler is turned off) and register their stoppable sections."""
    return _HANDLING is not None


@contextmanager
def handling(prog: str = "piper") -> Iterator[None]:
    """Handle SIGINT and SIGTERM for one command (module docstring); ``prog`` names it in
    the line of a hard exit. Re-entrant; does nothing outside the main thread."""
    global _HANDLING
    if _HANDLING is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    reset()
    handler = _Handling(prog)
    handler.install()
    _HANDLING = handler
    try:
        yield
    finally:
        _HANDLING = None
        handler.uninstall()
        reset()


def exit_promptly(code: int) -> int:
    """A command's ``python -m`` entry point ends with ``sys.exit(exit_promptly(code))``: after
    an interrupt (``code`` 130 or 143) the process ends at once, once stdout and stderr are
    flushed and the ``atexit`` handlers have run (e.g. Ray's shutdown), without the
    interpreter's teardown (freeing every module and the solver's arrays took 1-2 s after a
    DP on a loaded machine, past the 2 s promise). Any other code is returned."""
    if code not in {exit_code(s) for s in SIGNALS}:
        return code
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


# --------------------------------------------------------------------------- deadlines

_DEADLINE: list[float | None] = [None]


@contextmanager
def deadline_scope(deadline: float | None) -> Iterator[None]:
    """Make ``deadline`` the one :func:`checkpoint` reads (in every thread; nested scopes
    keep the earlier deadline)."""
    outer = _DEADLINE[-1]
    _DEADLINE.append(deadline if outer is None else (outer if deadline is None else min(outer, deadline)))
    try:
        yield
    finally:
        _DEADLINE.pop()


def current_deadline() -> float | None:
    """The deadline of the innermost :func:`deadline_scope` (None: no limit)."""
    return _DEADLINE[-1]


def expired(deadline: float | None) -> bool:
    """No time is left: the deadline has passed, or a stop was requested."""
    return _STATE.signum is not None or (deadline is not None and time.perf_counter() >= deadline)


def remaining(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (<= 0 once it passed, 0 after a stop request;
    None: no limit)."""
    if _STATE.signum is not None:
        return 0.0
    return None if deadline is None else deadline - time.perf_counter()


def check(deadline: float | None, where: str = "") -> None:
    """Raise :class:`Interrupted` after a stop request, :class:`TimeLimitReached` once
    ``deadline`` has passed (``where``: the step, for the message)."""
    signum = _STATE.signum
    if signum is not None:
        raise Interrupted(signum)
    if deadline is not None and time.perf_counter() >= deadline:
        raise TimeLimitReached(where)


def checkpoint(where: str = "") -> None:
    """:func:`check` against the deadline of the innermost :func:`deadline_scope`: call it
    once per row family or per layer while building a model."""
    check(_DEADLINE[-1], where)
