"""The types of solver knobs (``Options.params``) and their validation.

Each solver declares the knobs it understands in its registry entry
(:attr:`piper.solvers.registry.SolverInfo.params`, a mapping knob -> accepted types built from
the tuples below). A misspelt key (``{"engin": "table"}``) or a value of the wrong type is a
:class:`~piper.core.errors.SolverError` naming the key and listing the known ones, raised by the
registry before the solver runs (:meth:`piper.solvers.registry.SolverInfo.__call__`); the
command line turns it into exit status 2 and one line. Keys are documented in the solvers'
docstrings (``solve_dp``, ``solve_milp``, ``solve_cpsat``, ``solve_equi``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from piper.core.errors import SolverError

__all__ = ["BOOL", "INT", "NUMBER", "STR", "LIST", "DICT", "KnobTypes", "check_params"]

BOOL: tuple[type, ...] = (bool,)
INT: tuple[type, ...] = (int,)
NUMBER: tuple[type, ...] = (int, float)
STR: tuple[type, ...] = (str,)
LIST: tuple[type, ...] = (list, tuple)
DICT: tuple[type, ...] = (dict,)

#: knob name -> the types its value may have
KnobTypes = Mapping[str, tuple[type, ...]]


def check_params(solver: str, spec: KnobTypes | None, params: Mapping[str, Any]) -> None:
    """Raise SolverError for a key that ``spec`` (the solver's declared knobs) does not know, or a
    value of the wrong type (bool is not accepted where a number is). ``spec`` None: the solver
    declared nothing (one registered by others), nothing is checked."""
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
