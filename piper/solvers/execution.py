"""Running independent solves in isolated workers with a hard timeout, on one machine or on
a Ray cluster (issue 23): the one way ``experiments.compare``, ``experiments.paper`` and
``experiments.bench_exact`` run a solve, and the Ray path of the split proof.

A :class:`WorkerPool` gives each calling thread its own *worker*, a long-lived process
that runs picklable calls ``fn(*args)`` one at a time (imports and compiled code stay warm
between calls). :meth:`WorkerPool.call` returns an :class:`Outcome`: the value, or
``timeout`` (the call had not answered after its timeout: the worker is killed, child
processes included, and the next call starts a fresh one) or ``died`` (the worker vanished
without an answer: a crash in native code). :meth:`WorkerPool.map_unordered` drives
``jobs`` such threads over a list of items. Backends (:class:`ExecutionOptions`):

* ``local`` (default, no dependency): worker processes of this machine, each in its own
  process group (killed as a whole, MILP backend subprocesses included; deaf to the
  terminal's Ctrl-C). With one job and no hard timeout the calls run in this process.
* ``ray`` (``pip install -e ".[ray]"``): each worker is a Ray actor, placed by Ray on
  any node of the cluster at ``address`` (or ``RAY_ADDRESS``); without one, a local Ray
  instance is started. Ray is imported only here, only when asked for.

The project must be installed (same revision) on every node of a Ray cluster.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from piper.core.errors import PoolClosed, UsageError

__all__ = [
    "BACKENDS", "ExecutionOptions", "Outcome", "WorkerPool", "PoolClosed", "Progress", "init_ray", "ray_module",
    "RAY_MISSING", "add_backend_args", "execution_options", "probe_ray_address", "RAY_CONNECT_TIMEOUT_S",
]

BACKENDS = ("local", "ray")
RAY_MISSING = "the ray backend needs Ray: pip install -e \".[ray]\" (or pip install 'ray>=2.9')"
#: seconds a new Ray worker actor may take to start before its first call (not counted in
#: the call's hard timeout); one that does not start in time is reported as a dead worker
RAY_ACTOR_START_S = 300.0

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ExecutionOptions:
    """How independent calls are run."""

    #: "local" (processes of this machine) or "ray" (actors of a Ray cluster)
    backend: str = "local"
    #: calls in parallel (worker processes / actors; driver threads)
    jobs: int = 1
    #: seconds a call may take before its worker is killed; None: no watchdog (and, with
    #: one local job, the calls run in this process)
    hard_timeout: float | None = None
    #: Ray cluster address (None: RAY_ADDRESS, else a local instance)
    address: str | None = None
    #: modules a local worker imports up front (once, in the forkserver)
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        if self.jobs < 1:
            raise UsageError(f"jobs must be >= 1, got {self.jobs}")
        if self.hard_timeout is not None and not self.hard_timeout > 0:
            raise UsageError(f"the hard timeout must be > 0 seconds, got {self.hard_timeout:g}")

    @property
    def in_process(self) -> bool:
        return self.backend == "local" and self.jobs == 1 and self.hard_timeout is None


@dataclass(frozen=True)
class Outcome:
    """What one call gave: ``value`` when ``error`` is None, else ``error`` is "timeout"
    (killed at its hard timeout) or "died" (the worker vanished; ``message`` says how)."""

    value: Any = None
    error: str | None = None
    message: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


# ---------------------------------------------------------------------------------
# the local backend: one child process per worker, in its own process group
# ---------------------------------------------------------------------------------


def _child_main(conn: Any) -> None:
    """A local worker: its own process group (killed as a whole, deaf to the terminal's
    Ctrl-C), one call at a time; an exception becomes a "raised" message."""
    os.setpgrp()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            reply = ("ok", fn(*args))
        except Exception as exc:
            reply = ("raised", _describe(exc))
        conn.send(reply)


def _describe(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _context(preload: Sequence[str]) -> Any:
    """forkserver where available (workers start from a clean single-threaded server, safe
    with the driving threads), spawn otherwise."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver" and preload:
        ctx.set_forkserver_preload(list(preload))
    return ctx


class _LocalWorker:
    def __init__(self, context: Any) -> None:
        self._ctx = context
        self._proc: Any = None
        self._conn: Any = None
        #: incremented whenever a fresh process starts (callers keep per-process state by it)
        self.generation = 0

    def _ensure(self) -> Any:
        if self._proc is None or not self._proc.is_alive():
            self.close()
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_child_main, args=(child,), daemon=True, name="piper-worker")
            self._proc.start()
            child.close()
            self._conn = parent
            self.generation += 1
        return self._conn

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Outcome:
        conn = self._ensure()
        start = time.perf_counter()
        try:
            conn.send((fn, args))
            if conn.poll(timeout):
                kind, value = conn.recv()
                spent = time.perf_counter() - start
                if kind == "ok":
                    return Outcome(value, seconds=spent)
                return Outcome(None, "raised", value, spent)
        except (EOFError, OSError):
            code = self.close(wait=2.0)
            return Outcome(None, "died", f"the solver process died without an answer (exit code {code})",
                           time.perf_counter() - start)
        self.close()
        return Outcome(None, "timeout", f"killed after {timeout:g}s without an answer", time.perf_counter() - start)

    def close(self, wait: float = 0.0) -> int | None:
        """Kill the worker and its process group (after waiting up to ``wait`` seconds for
        it to exit by itself); its exit code (None if it was killed)."""
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return None
        if wait:
            proc.join(wait)
        code = proc.exitcode
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.is_alive():
            proc.kill()
        proc.join()
        return code


class _InProcessWorker:
    """Calls in the calling thread (one local job without a watchdog); exceptions,
    KeyboardInterrupt included, propagate."""

    generation = 1

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Outcome:
        start = time.perf_counter()
        return Outcome(fn(*args), seconds=time.perf_counter() - start)

    def close(self, wait: float = 0.0) -> None:
        return None


# ---------------------------------------------------------------------------------
# the Ray backend: one actor per worker
# ---------------------------------------------------------------------------------


def ray_module() -> Any:
    """``import ray``, or a :class:`UsageError` (exit 2, one line) saying how to get it."""
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


_RAY_LOCK = threading.Lock()


def init_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Connect to the Ray cluster at ``address`` (else ``RAY_ADDRESS``), or start a local
    instance (with ``num_cpus`` CPUs, default the machine's); idempotent. Returns ``ray``."""
    ray = ray_module()
    with _RAY_LOCK:
        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None:
                kwargs["num_cpus"] = max(num_cpus or 0, os.cpu_count() or 1)
            main = threading.current_thread() is threading.main_thread()
            term = signal.getsignal(signal.SIGTERM) if main else None
            if address is not None:
                probe_ray_address(address)
            ray.init(address=address, **kwargs)
            if main and term is not None:  # Ray's own handler would end the run without its cleanup
                signal.signal(signal.SIGTERM, term)
    return ray


#: seconds to wait for a TCP connection to a Ray cluster's address before giving up
RAY_CONNECT_TIMEOUT_S = 10.0


def probe_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """A :class:`UsageError` (one line) when nothing accepts a TCP connection at ``address``
    (``HOST:PORT`` or ``ray://HOST:PORT``) within ``timeout_s``: Ray itself would retry, printing
    warnings, for minutes. ``auto``, ``local`` and addresses of another shape are left to Ray."""
    import socket

    m = re.fullmatch(r"(?:ray://)?\[?([^\[\]\s]+?)\]?:([0-9]{1,5})", address.strip())
    if m is None:
        return
    host, port = m.group(1), int(m.group(2))
    if not 0 < port < 65536:
        raise UsageError(f"Ray address {address!r}: port {port} is not a TCP port (1..65535)")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        why = f"no answer within {timeout_s:g} s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc)).lower()
        raise UsageError(f"cannot reach the Ray cluster at {address!r} ({why}); "
                         "check --address / RAY_ADDRESS, or leave it out for a local Ray instance") from None


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class _RayActorBody:
    """The body of a Ray worker actor: calls ``fn(*args)``; a second method kills the
    processes the running call started (CBC), so that killing the actor leaves none."""

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
        try:
            return "ok", fn(*args)
        except Exception as exc:
            return "raised", _describe(exc)

    def ping(self) -> int:
        """The actor's process id: an answer means the actor has started."""
        return os.getpid()

    def kill_children(self) -> int:
        pids = _descendants(os.getpid())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return len(pids)


class _RayWorker:
    def __init__(self, ray: Any, actor_class: Any) -> None:
        self._ray, self._class = ray, actor_class
        self._actor: Any = None
        self.generation = 0

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Outcome:
        ray = self._ray
        if self._actor is None:
            self._actor = self._class.remote()
            self.generation += 1
            # the hard timeout is the call's: wait for the actor's process first (a loaded
            # machine or a busy cluster can take seconds to start one)
            start = time.perf_counter()
            try:
                ray.get(self._actor.ping.remote(), timeout=RAY_ACTOR_START_S)
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as exc:
                self.close()
                why = " ".join(str(exc).split())[:200]
                return Outcome(None, "died", f"the Ray worker did not start within {RAY_ACTOR_START_S:g}s ({why})",
                               time.perf_counter() - start)
        start = time.perf_counter()
        ref = self._actor.call.remote(fn, args)
        try:
            kind, value = ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            self.close()
            return Outcome(None, "timeout", f"killed after {timeout:g}s without an answer", time.perf_counter() - start)
        except ray.exceptions.RayActorError as exc:
            self._actor = None
            why = " ".join(str(exc).split())[:200]
            return Outcome(None, "died", f"the solver process died without an answer (Ray: {why})",
                           time.perf_counter() - start)
        spent = time.perf_counter() - start
        return Outcome(value, seconds=spent) if kind == "ok" else Outcome(None, "raised", value, spent)

    def close(self, wait: float = 0.0) -> None:
        actor, self._actor = self._actor, None
        if actor is None:
            return
        try:
            self._ray.get(actor.kill_children.remote(), timeout=5)
        except Exception:
            pass
        try:
            self._ray.kill(actor, no_restart=True)
        except Exception:
            pass


# ---------------------------------------------------------------------------------
# the pool
# ---------------------------------------------------------------------------------


class WorkerPool:
    """One worker per calling thread (``jobs`` threads give ``jobs`` workers), on the
    backend of ``options``. A context manager: leaving it kills every worker."""

    def __init__(self, options: ExecutionOptions) -> None:
        self.options = options
        self._local = threading.local()
        self._lock = threading.Lock()
        self._workers: list[Any] = []
        self._closed = False
        self._threads: ThreadPoolExecutor | None = None
        self._ctx: Any = None
        self._ray: Any = None
        self._actor_class: Any = None
        if options.backend == "ray":
            self._ray = init_ray(options.address, num_cpus=options.jobs)
            self._actor_class = self._ray.remote(num_cpus=1, max_concurrency=2, max_restarts=0)(_RayActorBody)
        elif not options.in_process:
            self._ctx = _context(("piper", *options.preload))

    def _worker(self) -> Any:
        if self._closed:
            raise PoolClosed("the run was stopped")
        worker = getattr(self._local, "worker", None)
        if worker is None:
            if self.options.in_process:
                worker = _InProcessWorker()
            elif self._ray is not None:
                worker = _RayWorker(self._ray, self._actor_class)
            else:
                worker = _LocalWorker(self._ctx)
            self._local.worker = worker
            with self._lock:
                self._workers.append(worker)
        return worker

    def generation(self) -> tuple[int, int]:
        """Identifies the calling thread's worker process: changes when it is replaced."""
        worker = self._worker()
        return id(worker), worker.generation

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Outcome:
        """``fn(*args)`` in the calling thread's worker; ``timeout`` defaults to the
        options' hard timeout. Raises :class:`PoolClosed` once the pool is closed."""
        worker = self._worker()
        out = worker.call(fn, args, self.options.hard_timeout if timeout is None else timeout)
        if self._closed:
            raise PoolClosed("the run was stopped")
        return out

    def map_unordered(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        """(index, ``fn(item)``) as they finish, ``fn`` running on ``jobs`` driver threads
        (each using this pool's worker of its thread; the threads live as long as the pool,
        so that their workers are reused by the next map); in order, one at a time, in this
        thread, with one job. Leaving early (an exception, Ctrl-C) closes the pool."""
        if self.options.jobs <= 1:
            for i, item in enumerate(items):
                yield i, fn(item)
            return
        with self._lock:
            if self._closed:
                raise PoolClosed("the run was stopped")
            if self._threads is None:
                self._threads = ThreadPoolExecutor(max_workers=self.options.jobs, thread_name_prefix="piper-job")
            threads = self._threads
        futures = {threads.submit(fn, item): i for i, item in enumerate(items)}
        complete = False
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
            complete = True
        finally:
            if not complete:
                for future in futures:
                    future.cancel()
                self.close()

    def close(self) -> None:
        """Kill every worker; later calls raise :class:`PoolClosed`."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            threads, self._threads = self._threads, None
        for worker in workers:
            worker.close()
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------
# progress on stderr
# ---------------------------------------------------------------------------------


class Progress:
    """finished/total on ``stream``: a one-line bar on a terminal (with the call running
    now), one line per finished item otherwise. Thread-safe."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, enabled: bool = True, width: int = 24) -> None:
        self.total, self.stream, self.enabled, self.width = total, stream, enabled, width
        self.done = 0
        self.start = time.perf_counter()
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._last = ""
        self._lock = threading.Lock()

    def _bar(self, text: str) -> None:
        filled = int(self.width * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        line = f"[{bar}] {self.done}/{self.total} {elapsed:4.0f}s  {text}"
        self.stream.write("\r" + line[:99].ljust(99))
        self.stream.flush()

    def update(self, name: str, verdict: str, short: str | None = None) -> None:
        """One more item finished (``short``: its word on the bar, default ``verdict``)."""
        with self._lock:
            self.done += 1
            if not self.enabled:
                return
            if self.tty:
                self._last = f"{name} {short or verdict}"
                self._bar(self._last)
            else:
                elapsed = time.perf_counter() - self.start
                self.stream.write(f"[{self.done}/{self.total}] {elapsed:.0f}s {name} {verdict}\n")
                self.stream.flush()

    def running(self, text: str) -> None:
        with self._lock:
            if self.tty:
                self._bar(f"running {text}")

    def close(self) -> None:
        with self._lock:
            if self.tty and self.done:
                self._bar(self._last)
                self.stream.write("\n")
                self.stream.flush()


# ---------------------------------------------------------------------------------
# command-line flags
# ---------------------------------------------------------------------------------


def add_backend_args(parser: Any) -> None:
    """``--backend local|ray`` and ``--address`` (the Ray cluster)."""
    parser.add_argument("--backend", choices=BACKENDS, default="local",
                        help="where runs execute: 'local' worker processes (default) or 'ray' actors "
                        "(pip install -e \".[ray]\")")  # fmt: skip
    parser.add_argument("--address", metavar="ADDR", default=None,
                        help="--backend ray: the Ray cluster to use (default: $RAY_ADDRESS, else a local Ray "
                        "instance started for this run)")  # fmt: skip


def execution_options(args: Any, hard_timeout: float | None, preload: Sequence[str] = ()) -> ExecutionOptions:
    """The :class:`ExecutionOptions` of ``--backend``, ``--address`` and ``--jobs`` (None:
    1 locally; every CPU of the cluster with Ray). Ray is imported (and started) only for
    ``--backend ray``; a missing Ray is a :class:`UsageError`."""
    backend, address = getattr(args, "backend", "local"), getattr(args, "address", None)
    if address is not None and backend != "ray":
        raise UsageError("--address is the Ray cluster's: use it with --backend ray")
    jobs = getattr(args, "jobs", None)
    if jobs is None:
        jobs = 1
        if backend == "ray":
            ray = init_ray(address)
            jobs = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return ExecutionOptions(backend, jobs, hard_timeout, address, tuple(preload))
