"""The iteration keys of docs/problem.md §10 in the DP: what it takes, and the check that it can.

A stage's TPS with the keys is

    X / (d B_edge) + P / d + max(0, N R / B_resync - H) / N + O / N

(H = the stage's sum of ``resyncOverlapTime``, O of ``stepTime`` + ``stepTimeSharded`` / d). The
max is not a sum over the stage's layers, so the DP's knapsack cannot price it per TMPC in general.
It can when the exposed resync and the step do not depend on the choice: when every layer's allowed
TMPCs at each degree t share the numbers they are made of (the parameter size w, the expert keys
e, e_t, w_x, and h, o, o_s). Then a stage's (or a device group's) resync, H and O are fixed by its
layers and (t, d), each knapsack prices its TMPCs without the resync, and the stage adds

    extra = max(0, N R / B_resync - H) / N + O / N        (>= 0, the same for every choice)

to its value (:func:`piper.dp.stage.stage_costs` adds it to every option of the stage's first layer,
so that every sum, bound and knapsack of the engines sees the exact stage value;
:mod:`piper.dp.groups` adds it to each group's value per count of identical layers). Every front-end
workload ``python -m piper plan`` solves has one TMPC per layer and degree, so the condition holds.

Two more facts the engines rely on hold only when a stage's value grows with its layers; with the keys
a layer lowers the exposed resync by up to h / N while adding at least p / d, so the DP also asks
h d <= N p (up to :data:`OVERLAP_RTOL`) for every allowed TMPC and d (a layer hides the resync behind at most the compute its
replica runs in an iteration, (N / d) p). With ``resyncOverlapWindow`` "schedule" (docs/problem.md §10.1) a
group of an interleaved layout hides W h with W <= m = N / d, so the DP also asks h <= p (then W h d <= N p). :func:`check_iteration_keys` refuses anything else with a
:class:`~piper.core.errors.SolverError` naming the layer, the degree and the numbers.
"""

from __future__ import annotations

from piper.core.errors import SolverError
from piper.core.options import Candidates
from piper.core.problem import TMPC, WINDOW_SCHEDULE, Problem

__all__ = ["OVERLAP_RTOL", "check_iteration_keys", "iteration_active", "shared_numbers"]

#: relative slack of the h d <= N p condition: a front end that hides the resync behind all of a
#: replica's compute (d = N, both overlaps) writes h = p up to rounding (forward + backward summed
#: apart); a stage value that falls by at most this fraction of a layer's compute when the layer
#: joins moves the DP's bounds by no more than the evaluator's agreement tolerance (1e-9 relative,
#: piper/core/checks.py)
OVERLAP_RTOL = 1e-12


def iteration_active(problem: Problem) -> bool:
    """Whether some TMPC of ``problem`` has a §10 key > 0 (then the DP prices them)."""
    return problem.has_iteration_keys


def shared_numbers(c: TMPC) -> tuple:
    """The numbers of a TMPC that a stage's resync, hidden time and step are made of."""
    return (c.parameter_size, c.expert_parallel, c.expert_tensor_parallel, c.expert_parameter_size,
            c.resync_overlap_time, c.step_time, c.step_time_sharded)


def check_iteration_keys(problem: Problem, cand: Candidates) -> None:
    """Raise a :class:`SolverError` unless the DP prices ``problem``'s §10 keys exactly under the
    allowed TMPCs ``cand`` (module docstring); nothing to check without the keys."""
    if not iteration_active(problem):
        return
    d_max = max(cand.ds)
    n_mb = problem.microbatches
    window = problem.resync_overlap_window == WINDOW_SCHEDULE
    for nd in problem.nodes:
        for t, lst in cand.tmpcs[nd.id].items():
            if not lst:
                continue
            first = lst[0][1]
            for _, c in lst[1:]:
                if shared_numbers(c) != shared_numbers(first):
                    raise SolverError(
                        f"the DP prices resyncOverlapTime / stepTime / stepTimeSharded (docs/problem.md §10) only when "
                        f"a layer's allowed TMPCs at a degree share parameterSize, the expert keys and those three "
                        f"keys; layer {nd.label} at t={t}: TMPC {first.id!r} and {c.id!r} differ (offer one TMPC per "
                        f"degree, or use the MILP, CP-SAT or brute force)")
            for _, c in lst:
                if window and c.resync_overlap_time > c.time_per_sample * (1 + OVERLAP_RTOL):
                    raise SolverError(
                        f"with resyncOverlapWindow 'schedule' (docs/problem.md §10.1) the DP takes resyncOverlapTime "
                        f"h only up to the layer's time per sample p (a group hides W h, W <= N / d); layer "
                        f"{nd.label}, TMPC {c.id!r} at t={t}: h = {c.resync_overlap_time:.6g} > p = "
                        f"{c.time_per_sample:.6g} (use brute force)")
                if c.resync_overlap_time * d_max > n_mb * c.time_per_sample * (1 + OVERLAP_RTOL):
                    raise SolverError(
                        f"the DP takes resyncOverlapTime h only up to the compute a layer's replica runs per "
                        f"iteration, (N / d) p (docs/problem.md §10); layer {nd.label}, TMPC {c.id!r} at t={t}: "
                        f"h = {c.resync_overlap_time:.6g} > (N / d) p = {n_mb / d_max * c.time_per_sample:.6g} "
                        f"at d = {d_max} (use the MILP, CP-SAT or brute force)")
