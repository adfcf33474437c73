r"""Exact CP-SAT model for Piper's partitioning problem (OR-Tools).

``solve_cpsat(problem, options)``. Same slots, options and choices as the MILP
(:mod:`baselines.exact.model_data`), with reification instead of big-M and y as a division.
The variables and constraints, the integer scaling of times (tolerance 2ε) and memory,
the proof portfolio of a search below a warm start, the guards against OR-Tools 9.15's
wrong-OPTIMAL bug (google/or-tools#5293: ``presolve_inclusion_work_limit = 0``), the
optional ``verify`` and the split over option sequences are written once in
``docs/formulations.md`` (§3 the CP-SAT model, §4 warm starts and the split, §6
statuses and guards, §7 numerics, §8 version 2 and uniform plans). Measurements are in
``docs/results/exact-models.md``.

This module is CP-SAT's interface to the exact models' driver
(:func:`baselines.exact.driver.solve_exact`): :class:`CpsatSolver` and the entry point
:func:`solve_cpsat`. The model is :mod:`baselines.cpsat.model`, the solver parameters
and the guard :mod:`baselines.cpsat.params`, one search :mod:`baselines.cpsat.solve_once`,
the split :mod:`baselines.cpsat.split`, the second opinion and the memory guard
:mod:`baselines.cpsat.verify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from baselines.cpsat.model import build_model
from baselines.cpsat.solve_once import CP_STATUS, solve_once
from baselines.cpsat.split import split_search
from baselines.cpsat.verify import restricted_memory
from baselines.exact.driver import PartSearch, SolvedPart, solve_exact
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result

__all__ = ["CpsatSolver", "solve_cpsat"]


@dataclass(frozen=True)
class CpsatSolver:
    """CP-SAT as an exact model of :func:`baselines.exact.driver.solve_exact`
    (:class:`baselines.exact.driver.ExactSolver`)."""

    #: the solver's name in the registry and the results
    NAME: ClassVar[str] = "cpsat"
    #: CP-SAT's status -> the answer's status (read in :func:`baselines.cpsat.solve_once.solve_once`)
    STATUS: ClassVar[dict[Any, Any]] = CP_STATUS
    #: the Python modules it needs
    REQUIRED_MODULES: ClassVar[tuple[str, ...]] = ("ortools",)

    @property
    def name(self) -> str:
        return self.NAME

    def split_allowed(self, options: Options) -> bool:
        """A usable warm start is all the split needs (its proof search is below it)."""
        return True

    def split_refusal(self, search: PartSearch) -> str:
        return ("params['split'] = 'sequences' splits a proof search below a warm start: "
                "give a usable warm start (e.g. the DP's plan)"
                + (f"; this one is not: {search.data.warm_message}" if search.options.warm_start is not None else ""))

    def solve(self, search: PartSearch) -> SolvedPart:
        """One search (:func:`baselines.cpsat.solve_once.solve_once`), then the memory guard."""
        model = build_model(search.data, search.options)
        stats: dict[str, Any] = {}
        if search.options.warm_start is not None and search.warm is None:
            stats["warm_start"] = search.data.warm_message
        if search.split_note:
            stats["split"] = search.split_note
        answer = solve_once(model, search.options, search.warm, search.start, search.deadline, stats)
        return SolvedPart(search, restricted_memory(model, answer))

    def split(self, search: PartSearch) -> SolvedPart:
        """The split proof search (:func:`baselines.cpsat.split.split_search`), then the memory guard."""
        assert search.warm is not None  # the driver splits only below a warm start
        model = build_model(search.data, search.options)
        answer = split_search(search.data, search.options, search.warm, search.deadline, model, search.start)
        return SolvedPart(search, restricted_memory(model, answer))


def solve_cpsat(problem: Problem, options: Options | None = None) -> Result:
    """Solve ``problem`` exactly (up to the documented 2ε) with CP-SAT.

    ``options.params``: ``num_workers`` (default ``options.threads``), ``msg`` (search
    log), ``precision_bits`` (P, default and at most 30: MAX_PRECISION_BITS), ``verify`` (re-prove an optimum with
    presolve off), ``cp_params`` (extra CP-SAT parameters; a value None leaves the
    default, e.g. {"presolve_inclusion_work_limit": None} switches the guard off),
    ``strict_cutoff`` (default True: a warm start makes a proof search below it; False
    hints it), ``proof_portfolio`` (default True: a proof search runs
    :data:`baselines.cpsat.params.PROOF_SUBSOLVERS` only), ``device_products`` (default
    True: the bin-packing rows), ``prefix_rows`` (default True: the prefix / suffix
    device-time rows of a proof search), ``prefix_cut_edges`` (default True: their
    crossing-edge terms), ``tmpc_symmetry`` (default True: the TMPC exchange rule of
    repeated layers), ``split`` ("none" or "sequences": the proof search below the warm
    start split over the stages' option sequences, :mod:`baselines.exact.sequences`; needs
    a warm start), ``max_sequences`` (default 20,000: the split refuses instances with more
    sequences), ``split_workers`` (default ``threads``: that many single-worker searches of
    the split at once), ``split_backend`` ("threads", default, or "ray": the split's
    sequences as Ray tasks sharing the cutoff,
    :func:`baselines.exact.split_ray.solve_sequences_ray`), ``ray_address`` (the Ray
    cluster; default ``RAY_ADDRESS``, else a local Ray instance).
    """
    return solve_exact(problem, options or Options(), CpsatSolver())
