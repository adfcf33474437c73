"""Splitting a proof search over *option sequences* (``params["split"] = "sequences"``).

Both exact models look for a plan with T <= cutoff below a warm start. A plan in the
models' form (used slots 1..L first, none empty) has an option sequence
σ = (o_1, ..., o_L): slot i's (t, d). Fixing σ fixes every D_i = Σ_{j>=i} d_j and so
every y_i = ⌈D_i/d_i⌉: the memory rows lose their dependence on y, the slot's
devices become constants, and the subproblem is far easier than the disjunction over
all sequences that the whole model has to refute (measured on ResNet-50 k=8: 126
sequences refuted by CP-SAT in 21 s, where the whole model had no proof after 300 s).

Every sequence with Σ t_i d_i <= k, Σ d_i <= S and L <= the number of slots is a
subproblem (version 2: k is the model's part's device budget, min(k, G) for plans inside
a node, and a part of plans spanning nodes also needs Σ t_i d_i >= G + 1; with uniform
plans only constant sequences o_1 = ... = o_L are enumerated), except those that two bounds rule out, each implied by the model's own
rows at the cutoff C (in the model's units, so the pruning is exactly as strong as the
model and never removes a plan the model accepts):

* a layer needs a slot i with a choice at σ's option o_i whose κ <= C (a stage is at
  least as slow as each of its layers) and whose memory a·y_i + b fits in M;
* Σ_v min over such (slot, choice) of t d κ <= C · Σ_i t_i d_i (each stage's time is
  <= C, so its devices times C cover its layers' device-time).

The number of sequences grows like the compositions of k (287 for the 16-layer
branchy instance at k = 8, about 270,000 at k = 16), so the split is for small k;
``max_sequences`` refuses more.

The subproblems run on threads of this process (:mod:`baselines.exact.split_threads`,
default), or with ``params["split_backend"] = "ray"`` as Ray tasks on a cluster
(:mod:`baselines.exact.split_ray`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from baselines.exact.model_data import Choice, ModelData
from piper.core.errors import SolverError

__all__ = ["split_mode", "option_sequences", "checked_sequences", "sequence_y", "MAX_SEQUENCES", "SPLIT_MODES",
           "SPLIT_BACKENDS", "split_backend"]

#: default cap on the number of subproblems (``params["max_sequences"]``)
MAX_SEQUENCES = 20_000
SPLIT_MODES = ("none", "sequences")
#: where the subproblems run: threads of this process, or Ray tasks
SPLIT_BACKENDS = ("threads", "ray")


def _choice(params: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """``params[key]`` checked against ``allowed`` (default: its first entry)."""
    value = str(params.get(key, allowed[0]))
    if value not in allowed:
        raise SolverError(f"params[{key!r}] must be one of {', '.join(allowed)}, not {value!r}")
    return value


def split_mode(params: Mapping[str, Any]) -> str:
    """``params["split"]`` checked: one of :data:`SPLIT_MODES` (default "none")."""
    return _choice(params, "split", SPLIT_MODES)


def split_backend(params: Mapping[str, Any]) -> str:
    """``params["split_backend"]`` checked: "threads" (default: this process) or "ray"."""
    return _choice(params, "split_backend", SPLIT_BACKENDS)


def checked_sequences(
    data: ModelData, cutoff: float, kappa: Callable[[Choice], float], params: Mapping[str, Any]
) -> list[tuple[int, ...]]:
    """:func:`option_sequences` with the cap ``params["max_sequences"]`` (default
    :data:`MAX_SEQUENCES`); more sequences than that is a :class:`SolverError`."""
    limit = int(params.get("max_sequences", MAX_SEQUENCES))
    seqs = option_sequences(data, cutoff, kappa, limit=limit)
    if seqs is None:
        raise SolverError(
            f"params['split'] = 'sequences': more than {limit} option sequences on this instance "
            f"(k = {data.problem.devices}); raise params['max_sequences'] or use split = 'none'"
        )
    return seqs


def option_sequences(
    data: ModelData, cutoff: float, kappa: Callable[[Choice], float], *, limit: int = MAX_SEQUENCES
) -> list[tuple[int, ...]] | None:
    """The option sequences (indices into ``data.opts``, slot 1 first) that pass both
    bounds at ``cutoff``, with ``kappa(choice)`` the node term in the same units; None
    when there are more than ``limit``. Shorter sequences come first."""
    # k: the part's device budget; a "spanning" part wants Σ t d >= min_devices, and a
    # uniform model only constant sequences (baselines.exact.model_data)
    opts, k, s_max = data.opts, data.devices, data.s_max
    # v -> (option, y) -> its cheapest device-time t·d·κ among the choices with κ <= cutoff
    # whose memory a·y + b fits (within 1e-9 of M: never stricter than the models)
    work: dict[int, dict[tuple[int, int], float]] = {}
    for v, choices in data.choices.items():
        best: dict[tuple[int, int], float] = {}
        for c in choices:
            kq = kappa(c)
            if kq > cutoff:
                continue
            o = opts[c.opt]
            for y in range(1, -(-s_max // o.d) + 1):
                if c.mem_a * y + c.mem_b > 1.0 + 1e-9:
                    break  # memory grows with y
                best[(c.opt, y)] = min(best.get((c.opt, y), math.inf), o.t * o.d * kq)
        if not best:
            return []  # a layer fits nowhere below the cutoff: nothing to refute
        work[v] = best
    out: list[tuple[int, ...]] = []

    def passes(seq: list[int], devices: int) -> bool:
        if devices < data.min_devices:
            return False
        ys = sequence_y(data, tuple(seq))
        slots = {(o, ys[i]) for i, o in enumerate(seq, 1)}
        need = 0.0
        for best in work.values():
            cheapest = min((w for key, w in best.items() if key in slots), default=None)
            if cheapest is None:
                return False
            need += cheapest
        return need <= devices * cutoff * (1 + 1e-9)  # slack for float sums; integers are exact

    def extend(seq: list[int], devices: int, dsum: int) -> bool:
        if seq and passes(seq, devices):
            out.append(tuple(seq))
            if len(out) > limit:
                return False
        if len(seq) == data.slots:
            return True
        for j, o in enumerate(opts):
            if data.uniform and seq and j != seq[0]:
                continue
            if devices + o.t * o.d <= k and dsum + o.d <= s_max:
                seq.append(j)
                ok = extend(seq, devices + o.t * o.d, dsum + o.d)
                seq.pop()
                if not ok:
                    return False
        return True

    if not extend([], 0, 0):
        return None
    out.sort(key=len)
    return out


def sequence_y(data: ModelData, seq: tuple[int, ...]) -> dict[int, int]:
    """Slot (1-based) -> y_i = ⌈D_i/d_i⌉ for the sequence ``seq``."""
    ys: dict[int, int] = {}
    suffix = 0
    for i in range(len(seq), 0, -1):
        d = data.opts[seq[i - 1]].d
        suffix += d
        ys[i] = -(-suffix // d)
    return ys
