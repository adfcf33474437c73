"""The paper's variants (Piper, its ablations and the equi baselines) as registry solvers and
Options: the one mapping the paper's figures and the DP benchmark use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from piper.core.options import NO_AR, Options

__all__ = ["DP_VARIANTS", "EQUI_VARIANTS", "VARIANTS", "variant_solver"]

#: variant names used in every CSV, in plotting order
DP_VARIANTS = ("piper", "noDP", "noTP", "noAR")
EQUI_VARIANTS = ("equi_noTP", "equi")
VARIANTS = DP_VARIANTS + EQUI_VARIANTS + ("equi_nonTransformer",)


def variant_solver(
    variant: str,
    knapsack: str = "greedy",
    time_limit_s: float | None = None,
    params: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[str, Options]:
    """The registry solver and the Options of a paper variant (the one mapping every figure uses).

    ``overrides`` replace Options fields (e.g. ``{"linearize": True}``).

    ``params`` are merged into ``Options.params`` (e.g. ``{"curve": True}`` for
    the DP's best-TPS-per-device-count curve). DP runs get ``{"curve": False}``
    unless asked: the figures that need no curve should not pay for it.
    """
    if knapsack not in ("greedy", "exact"):
        raise ValueError(f"knapsack must be 'greedy' or 'exact', not {knapsack!r}")
    dp = "dp-greedy" if knapsack == "greedy" else "dp"
    base = Options(knapsack=knapsack, time_limit_s=time_limit_s)
    table: dict[str, tuple[str, Options]] = {
        "piper": (dp, base),
        "noDP": (dp, replace(base, data_parallel=False)),
        "noTP": (dp, replace(base, tensor_parallel=False)),
        "noAR": (dp, replace(base, exclude_tmpcs=NO_AR)),
        "equi": ("equi", base),
        "equi_noTP": ("equi", replace(base, tensor_parallel=False)),
        "equi_nonTransformer": ("equi", replace(base, tensor_parallel=False, params={"equi_mode": "topological"})),
    }
    try:
        solver, opts = table[variant]
    except KeyError:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(table)}") from None
    merged = dict(opts.params)
    if solver.startswith("dp"):
        merged.setdefault("curve", False)
    merged.update(params or {})
    return solver, replace(opts, params=merged, **dict(overrides or {}))
