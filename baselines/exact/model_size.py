"""The size of an exact model, estimated from its data before it is built, and the cap
that refuses a hopeless one (docs/errors.md, "Time limits"): :func:`estimate_model_size`,
:func:`check_model_size`.

Both models (the MILP and CP-SAT) have one assignment variable x[v, i, c] per layer v,
slot i <= max_slot[v] and choice c of v whose option is allowed in slot i, and each x
appears in a few rows per layer (assignment, slot option, order, stage time, batch and
device rows), in the memory rows of its slot (one per y) and in the rows of v's cut
edges. The estimate of the nonzeros counts exactly that; it was within 25 % of the
MILP's count on chains, ResNet-50 and random instances (the CP-SAT model has about as
many terms). Building takes about 25 µs per nonzero (PuLP or OR-Tools' Python layer,
on a loaded 2-core machine), the MILP about 1 KB of memory per nonzero.
"""

from __future__ import annotations

from dataclasses import dataclass

from baselines.exact.model_data import ModelData
from piper.core.errors import SolverError
from piper.core.options import Options

__all__ = ["DEFAULT_MAX_MODEL_SIZE", "ModelSize", "estimate_model_size", "check_model_size"]

#: the default cap on the estimated nonzeros (``params["max_model_size"]``, ``solve
#: --max-model-size``): about 3 GB and a few minutes of building
DEFAULT_MAX_MODEL_SIZE = 3_000_000
#: per assignment variable: assignment, slot option (B, C), order (D), stage time (I),
#: batch and device rows (J) and the layer's own (J) row
_ROWS_PER_X = 8


@dataclass(frozen=True)
class ModelSize:
    """An estimate of a model's size."""

    #: assignment variables x[v, i, c]
    assignments: int
    #: nonzeros (terms of the rows)
    nonzeros: int


def estimate_model_size(data: ModelData) -> ModelSize:
    """The model's size from ``data`` (module docstring), in time linear in the assignments."""
    degree: dict[int, int] = {}
    for a, b in data.edges:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    assignments = nonzeros = 0
    for v, choices in data.choices.items():
        per_opt: dict[int, int] = {}
        for c in choices:
            per_opt[c.opt] = per_opt.get(c.opt, 0) + 1
        edge_terms = 2 * degree.get(v, 0)
        for i in range(1, data.max_slot.get(v, 0) + 1):
            for o in data.slot_opts.get(i, ()):
                count = per_opt.get(o, 0)
                if count:
                    assignments += count
                    nonzeros += count * (_ROWS_PER_X + data.y_max.get((i, o), 1) + edge_terms)
    return ModelSize(assignments, nonzeros)


def check_model_size(data: ModelData, options: Options, solver: str) -> ModelSize:
    """Refuse (:class:`SolverError`: one line, exit 2) a model whose estimated nonzeros
    exceed ``params["max_model_size"]`` (default :data:`DEFAULT_MAX_MODEL_SIZE`), naming
    the estimate and the flag that raises the cap."""
    size = estimate_model_size(data)
    cap = int(options.params.get("max_model_size", DEFAULT_MAX_MODEL_SIZE))
    if size.nonzeros > cap:
        raise SolverError(
            f"the {solver} model of this instance would have about {size.nonzeros:,} nonzeros "
            f"({size.assignments:,} assignment variables; about {size.nonzeros * 25e-6:.0f} s and "
            f"{size.nonzeros / 1e6:.1f} GB to build), over the cap of {cap:,}: raise it with --max-model-size "
            "(params['max_model_size']) if time and memory allow, or use the DP")
    return size
