"""The solver knobs (``Options.params``) each solver understands, and their validation.

A misspelt key (``{"engin": "table"}``) or a value of the wrong type is a
:class:`~piper.core.result.SolverError` naming the key and listing the known ones, raised by
the registry before the solver runs (:meth:`piper.solvers.registry.SolverInfo.__call__`); the command
line turns it into exit status 2 and one line. Keys are documented in the solvers'
docstrings (``solve_dp``, ``solve_milp``, ``solve_cpsat``, ``solve_equi``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from piper.core.errors import SolverError

__all__ = ["PARAMS", "check_params"]

_BOOL = (bool,)
_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_LIST = (list, tuple)

#: knobs shared by the MILP and CP-SAT (the split over option sequences, logs, verification)
_EXACT_COMMON: dict[str, tuple[type, ...]] = {
    "msg": _BOOL, "verify": _BOOL, "split": _STR, "max_sequences": _INT, "split_workers": _INT,
    "tmpc_symmetry": _BOOL, "split_backend": _STR, "ray_address": _STR,
}

#: solver function ("module:function") -> {knob: accepted types}
PARAMS: dict[str, dict[str, tuple[type, ...]]] = {
    "piper.dp:solve_dp": {"engine": _STR, "curve": _BOOL, "curve_points": _LIST, "greedy_bound": _BOOL},
    "baselines.milp.solver:solve_milp": {
        **_EXACT_COMMON, "backend": _STR, "gap_abs": _NUM, "cutoff": _BOOL, "cbc_options": _LIST,
    },
    "baselines.cpsat.solver:solve_cpsat": {
        **_EXACT_COMMON, "num_workers": _INT, "precision_bits": _INT, "cp_params": (dict,), "strict_cutoff": _BOOL,
        "proof_portfolio": _BOOL, "device_products": _BOOL, "prefix_rows": _BOOL, "prefix_cut_edges": _BOOL,
    },
    "baselines.brute:solve_brute": {},
    "baselines.equi:solve_equi": {"equi_mode": _STR, "equi_separate": _BOOL},
}


def check_params(solver: str, target: str, params: Mapping[str, Any]) -> None:
    """Raise SolverError for a key ``target``'s solver does not know, or a value of the wrong
    type (bool is not accepted where a number is). Unknown targets (solvers registered by
    others) are not checked."""
    spec = PARAMS.get(target)
    if spec is None:
        return
    for key, value in params.items():
        if key not in spec:
            known = ", ".join(sorted(spec)) or "none"
            raise SolverError(f"solver {solver!r}: unknown parameter {key!r} (known: {known})")
        types = spec[key]
        if isinstance(value, bool) and bool not in types:
            ok = False
        else:
            ok = isinstance(value, types)
        if not ok:
            want = " or ".join(t.__name__ for t in types)
            raise SolverError(f"solver {solver!r}: parameter {key!r} must be {want}, got {value!r}")
