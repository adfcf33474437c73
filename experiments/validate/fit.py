"""The constants fitted on the published rows, and leave-one-out (LOO) errors.

Per accelerator two constants of its matrix-product efficiency curve are fitted
(``piper/frontend/operations.py``): e_max (``gemm_efficiency``) and d0 (``gemm_half_dim``),
minimizing the mean squared log error of the predicted iteration times over that
accelerator's fitting rows (Nelder-Mead from the catalog's values, e_max in [0.3, 1],
d0 in [0, 2048]). Every other constant is the catalog's (sources in
``piper/frontend/hardware.py``). A row's LOO error is its error under constants fitted
without it. The machinery is generic: :func:`fit` and :func:`leave_one_out` take any
``predict(case, params) -> seconds`` and rows with ``published_time_s``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

__all__ = ["PARAM_BOUNDS", "RECOMPUTE_ORDER", "fit", "least_recompute_score", "leave_one_out", "log_error",
           "predict_time_s", "score_case"]

#: (e_max, d0) bounds
PARAM_BOUNDS = ((0.3, 1.0), (0.0, 2048.0))
#: Nelder-Mead's scale per parameter (the simplex moves in units of these)
PARAM_SCALE = (1.0, 1000.0)
#: the recomputation kinds a row tries, least first, when the source does not state its own
RECOMPUTE_ORDER = ("none", "selective", "full")


def least_recompute_score(cfg: Any, hw: Any, setup: Any, layout: Any,
                          kinds: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m piper score``'s record of ``layout`` with the first recomputation kind of ``kinds``
    whose plan fits (default: the layout's own recomputation, then the kinds of :data:`RECOMPUTE_ORDER`
    that recompute more); the last kind's record (``batch_time_s`` None) when none fits."""
    from piper.frontend.score import score_layout

    if kinds is None:
        kinds = RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(layout.recompute):]
    r: dict[str, Any] = {}
    for rc in kinds:
        r = score_layout(cfg, hw, setup, replace(layout, recompute=rc))
        if r["batch_time_s"] is not None:
            break
    return r


def score_case(case: Any, params: Sequence[float]) -> dict[str, Any]:
    """``python -m piper score``'s record of ``case`` (a :class:`~experiments.validate.rows.Case`) with
    the matrix products' (e_max, d0) = ``params``: per variant (``case.extra["variants"]``, (config,
    layout) pairs, when the row leaves the micro-batch or v open; else ``case.cfg`` and ``case.layout``)
    the least recomputation that fits when its own OOMs (``recompute`` first); the variant with the
    least batch time wins (the score's choice). ``batch_time_s`` None: nothing fits."""
    e_max, d0 = params
    hw = case.hw.with_changes(gemm_efficiency=e_max, gemm_half_dim=d0)
    best: dict[str, Any] = {}
    for cfg, layout in case.extra.get("variants", ((case.cfg, case.layout),)):
        r = least_recompute_score(cfg, hw, case.setup, layout,
                                  RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(layout.recompute):])
        if not best or (r["batch_time_s"] is not None
                        and (best["batch_time_s"] is None or r["batch_time_s"] < best["batch_time_s"])):
            best = r
    return best


@functools.lru_cache(maxsize=4096)
def _cached_time_s(case: Any, params: tuple[float, ...]) -> float:
    t = score_case(case, params)["batch_time_s"]
    return math.inf if t is None else t


def predict_time_s(case: Any, params: Sequence[float]) -> float:
    """The iteration time of ``case`` under ``params`` (:func:`score_case`); inf when nothing fits.
    Memoized per (case, params): the fits evaluate the same points again (every leave-one-out fit
    starts from the same simplex on the same rows), and a score depends on nothing else."""
    return _cached_time_s(case, tuple(float(x) for x in params))


def log_error(pred: float, published: float) -> float:
    return math.log(pred / published) if math.isfinite(pred) and pred > 0 else 10.0


class _OutOfTime(Exception):
    pass


def fit(rows: Sequence[Any], predict: Callable[[Any, Sequence[float]], float], start: Sequence[float],
        bounds: Sequence[tuple[float, float]] = PARAM_BOUNDS, time_limit_s: float | None = None,
        scale: Sequence[float] | None = None) -> tuple[float, ...]:
    """Parameters minimizing the mean squared log error of ``predict`` over ``rows`` (the best
    found so far when ``time_limit_s`` runs out). ``scale``: Nelder-Mead's unit per parameter
    (default :data:`PARAM_SCALE`, for (e_max, d0))."""
    import time

    from scipy.optimize import minimize

    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    best: list[Any] = [math.inf, list(start)]

    if scale is None:
        scale = PARAM_SCALE[:len(start)] if len(start) <= len(PARAM_SCALE) else (1.0,) * len(start)

    def clip(z) -> list[float]:
        return [min(max(v * sc, lo), hi) for v, sc, (lo, hi) in zip(z, scale, bounds)]

    def loss(z) -> float:
        if deadline is not None and time.perf_counter() > deadline:
            raise _OutOfTime
        x = clip(z)
        value = sum(log_error(predict(r, x), r.published_time_s) ** 2 for r in rows) / len(rows)
        if value < best[0]:
            best[:] = [value, x]
        return value

    try:
        res = minimize(loss, [v / sc for v, sc in zip(start, scale)], method="Nelder-Mead",
                       options={"xatol": 2e-3, "fatol": 1e-6, "maxiter": 120})
        return tuple(clip(res.x))
    except _OutOfTime:
        return tuple(best[1])


def leave_one_out(rows: Sequence[Any], predict: Callable[[Any, Sequence[float]], float], start: Sequence[float],
                  bounds: Sequence[tuple[float, float]] = PARAM_BOUNDS, log=None,
                  time_limit_s: float | None = None, scale: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """For each row: the constants fitted on the other rows and its predicted time under them."""
    out = []
    for i, row in enumerate(rows):
        rest = [r for j, r in enumerate(rows) if j != i]
        params = fit(rest, predict, start, bounds, time_limit_s, scale)
        pred = predict(row, params)
        out.append({"row": row, "params": params, "predicted_time_s": pred,
                    "error_percent": 100 * (pred / row.published_time_s - 1)})
        if log:
            log(f"LOO {getattr(row, 'name', i)}: {out[-1]['error_percent']:+.1f}% with {params}")
    return out
