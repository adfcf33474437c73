"""``python -m experiments.compare``: run every solver on every instance, score every
plan with the one evaluator, and prove or refute that the solvers agree.

    python -m experiments.compare                      # the default suite, every solver
    python -m experiments.compare --suite tiny,small --solvers dp,milp-highs,brute
    python -m experiments.compare FILE.json -k 4 -M 8GiB --slice 10 --time-limit 30
    python -m experiments.compare --list               # suites and solvers

Checks, per instance. Two numbers a, b "agree" when |a - b| <= max(rtol * max(|a|, |b|),
atol), with ``rtol`` = ``--rtol`` (default 1e-9: floating-point noise only) and ``atol``
the solver's own certificate tolerance ``Result.tolerance`` (time units; 0 for the DP
and brute force; CP-SAT's 2ε of its integer scaling; the MILP's, from its solvers'
feasibility tolerances and its cutoff, docs/formulations.md §7). The solvers state the
tolerance of each claim, and compare holds them to exactly that. Only evaluated TPS
values are compared (the evaluator's score of the returned plan), never a solver's own
claim. Per run, the one result check :func:`piper.check_result` (run where the Result was
made, :mod:`.solve`), reported under its own check names (``piper.core.checks.CHECKS``):

1. ``objective``: a returned plan's claimed objective (``Result.objective``) agrees
   with its evaluated TPS, within the solver's tolerance.
2. ``plan``: a plan exactly when the status says so, and it fits in memory.
3. ``tps``: ``Result.tps`` is the evaluator's score of the plan (compare
   re-scores every plan itself; a solver that bypasses ``make_result`` is caught).
4. ``status``, ``options``, ``bound``: the status consistent ("optimal" only from an
   exact solver), the options honoured (no d > 1 without data parallelism, no excluded
   TMPC, one (d, t) when uniform, ...), the bound consistent with the status and the
   plan (an optimal plan within its tolerance of its bound).

and compare's own:

5. ``exception``: a solver raised something other than ``SolverError``, returned
   something other than a Result, returned a structurally invalid plan, or its worker
   died.

Across solvers (:mod:`.cross_checks`):

6. ``optimality``: no plan found by any solver (exact or heuristic) beats a proven
   optimum: an exact solver's "optimal" value is at most its tolerance above the best
   evaluated plan, and an exact "infeasible" holds only if nobody found a plan.
   Two exact solvers that disagree always trip this check (the worse one is
   named, the better one holds an evaluated plan that refutes it).
7. ``bound``: no exact solver's lower bound exceeds the best evaluated plan (piper's
   ``bound`` check held against every solver's plan, not only the solver's own).

A ``SolverError`` ("too large", missing backend, ...) marks the run ``skipped``
with the reason, as does a graph larger than the registry's ``max_nodes``; a
solver whose module does not import is ``unavailable``. An exact solver that
stops without a proof (status feasible / unknown: its time limit) is reported with
its incumbent and bound (``limit`` in the table) and never counted as disagreeing.
An exact solver that returns no proof long before its limit (< 90% of it) is shown
as ``(early)`` with its message: not a failed check, but worth a look. The gap of a
plan is TPS / optimum - 1 against the proven optimum, or against the best plan
found (marked ``~``) when nobody proved one.

Execution (:mod:`piper.solvers.execution`). By default every solve runs in a long-lived worker
process (its own process group) with a watchdog: a solve that has not answered after
``--hard-timeout`` seconds (default 2 x the time limit + 30) is killed, MILP backend
subprocesses included, and reported as ``killed`` (a limit, not a failed check); a
worker that dies (native crash) is a failed check. Each worker runs an untimed warm-up
solve per solver first, so that reported times exclude imports and numba compilation.
``--jobs N`` drives N such workers (instances in parallel); ``--hard-timeout 0`` drops
the watchdog (and solves in this process with one job). ``--backend ray`` runs the
workers as Ray actors, on the cluster at ``--address`` / ``RAY_ADDRESS`` or on a local
Ray instance (``pip install -e ".[ray]"``); the rows and checks are the same.

Exit status: 0 when every check passed and at least one instance was proven by an exact
solver; 1 when any check failed, or when nothing was proven (one line on stderr says so) (each offending
instance is written to ``OUT/failed/NAME.json`` so that
``python -m experiments.compare OUT/failed/NAME.json`` re-runs it alone); 2 for
usage errors; 130 when interrupted (the reports keep every finished instance:
they are rewritten, atomically, after each one).
"""
