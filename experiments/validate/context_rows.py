"""The published rows with context parallelism (issue 31): [L3] Table 4's long-context row (16,384
H100, TP 8, CP 16, PP 16, DP 8, sequence 131,072, 380 TFLOP/s per GPU), scored like the dense
Llama 3 rows of :mod:`experiments.validate.rows` (same setup and assumptions) with ``--cp 16`` and
the paper's all-gather of K and V (``--cp-comm-type allgather``).

The row's batch: DP 8 x 16 sequences per replica = 128 sequences of 131,072 tokens (16M tokens,
as Table 4 says). Published iteration time: the row's TFLOP/s converted with Megatron's FLOP count
(full, non-causal attention), as for the dense rows; the paper does not give its count, and at
131k tokens attention is most of the FLOPs, so :func:`context_variants` also reports the time with
the causal half of attention (a 1.4x shorter target). Meta's pipeline schedule is interleaved: the
row is scored as the dense rows, with the layout the paper describes (v = 8, Meta's split with the
embedding and the loss counted as layers, first and last chunk one layer short), no recomputation
when it fits, and memory against the whole device; :func:`context_variants` lists every v.

Which attention kernel Meta ran is not stated either, and the row depends on it as much as on the
count: :func:`attention_kernel_readings` scores every Llama 3 row with the catalog's fused-attention
efficiency and with FlashAttention-2's on H100, and finds the efficiency at which the long-context
row would meet each published time.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from typing import Any

from experiments.validate.fit import least_recompute_score, score_case
from experiments.validate.rows import DATA_DIR, Case, llama3_case, llama3_layout, llama3_row
from piper.frontend.hardware import hardware
from piper.frontend.score import Layout

__all__ = ["ATTENTION_KERNELS", "CONTEXT_ASSUMPTIONS", "attention_kernel_readings", "break_even_efficiency",
           "context_variants", "llama3_context_cases"]

#: added to the Llama 3 table's assumptions for the context-parallel row
CONTEXT_ASSUMPTIONS = [
    ("the long-context row (CP 16): the paper's all-gather of K and V (Section 3.3.2; Megatron-Core's "
     "--cp-comm-type allgather, exposed, piper/frontend/context.py), the sequence split in 2c chunks; v as for the "
     "dense rows (v = 8)"),
]


def llama3_context_cases() -> list[Case]:
    """[L3] Table 4's rows with context parallelism > 1."""
    out = []
    hw = hardware("h100")
    with open(DATA_DIR / "llama3_table4.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    for r in table:
        c = int(r["context_parallel"])
        if c == 1:
            continue
        gpus, t, p, d, _gb, cfg, setup, tflops, time_s = llama3_row(r, hw)
        setup = replace(setup, cp_comm_type="allgather")  # [L3] Section 3.3.2's scheme
        lay = Layout(tp=t, cp=c, pp=p, dp=d, recompute="none", sequence_parallel=True)
        out.append(llama3_case("llama3", f"llama3-405b-{gpus}-cp{c}", cfg, hw, setup, lay, time_s, tflops, gpus))
    return out


def context_variants(case: Case, params: tuple[float, float], vps: tuple[int, ...] = (1, 2, 4, 8)) -> list[dict[str, Any]]:
    """``case`` scored with the fitted (e_max, d0) at each v of ``vps``: the first recomputation that
    fits (none, selective, full), the predicted time and its error against both published times."""
    e_max, d0 = params
    hw = case.hw.with_changes(gemm_efficiency=e_max, gemm_half_dim=d0)
    rows = []
    for vp in vps:
        layout = replace(case.layout, vp=vp, stage_layers=llama3_layout(case.cfg.layers, case.layout.pp, vp))
        m = least_recompute_score(case.cfg, hw, case.setup, layout)
        pred = m["batch_time_s"]
        causal = case.extra["causal_time_s"]
        rows.append({
            "row": case.name, "vp": vp, "tmpc": m["tmpc"], "predicted_time_s": pred,
            "published_time_s": case.published_time_s, "published_causal_time_s": causal,
            "error_percent": None if pred is None else 100 * (pred / case.published_time_s - 1),
            "error_causal_percent": None if pred is None else 100 * (pred / causal - 1),
            "max_memory_gb": m["max_memory_bytes"] / 1e9, "tokens_per_s": m["tokens_per_s"],
            "bottleneck": m["bottleneck"],
        })
    return rows


#: fused-attention efficiencies (fraction of the BF16 peak, forward and backward) the Llama 3 rows are
#: read with besides the catalog's (piper/frontend/hardware.py): Shah et al., FlashAttention-3 (2024),
#: abstract: "FlashAttention-2 achieving only 35% utilization on the H100 GPU"
ATTENTION_KERNELS = {"FlashAttention-2 on H100": 0.35}


def _predicted_s(case: Case, params: tuple[float, float], efficiency: float) -> float | None:
    hw = case.hw.with_changes(flash_attention_efficiency=efficiency)
    return score_case(replace(case, hw=hw), params)["batch_time_s"]


def break_even_efficiency(case: Case, params: tuple[float, float], target_s: float,
                          lo: float = 0.05, hi: float = 1.0, steps: int = 30) -> float | None:
    """The fused-attention efficiency at which ``case`` is predicted to take ``target_s`` seconds
    (bisection: the predicted time falls as the efficiency rises); None when the target lies outside
    what efficiencies in [lo, hi] give, or a layout does not fit."""
    t_lo, t_hi = _predicted_s(case, params, lo), _predicted_s(case, params, hi)
    if t_lo is None or t_hi is None or not t_hi <= target_s <= t_lo:
        return None
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        t = _predicted_s(case, params, mid)
        if t is None:
            return None
        lo, hi = (mid, hi) if t > target_s else (lo, mid)
    return 0.5 * (lo + hi)


def attention_kernel_readings(cases: list[Case], params: tuple[float, float]) -> dict[str, Any]:
    """Every Llama 3 row (``cases``) scored with the catalog's fused-attention efficiency and each of
    :data:`ATTENTION_KERNELS`: the predicted time and its error against both published times (Megatron's
    full count and the causal half). For the rows with context parallelism, the efficiency at which the
    prediction meets each published time and the one at which it is 10% short of the full-count time
    (:func:`break_even_efficiency`)."""
    rows = []
    for case in cases:
        kernels = {"catalog": case.hw.flash_attention_efficiency, **ATTENTION_KERNELS}
        for kernel, eff in kernels.items():
            pred = _predicted_s(case, params, eff)
            causal = case.extra["causal_time_s"]
            rows.append({"row": case.name, "kernel": kernel, "flash_attention_efficiency": eff, "predicted_time_s": pred,
                         "error_percent": None if pred is None else 100 * (pred / case.published_time_s - 1),
                         "error_causal_percent": None if pred is None else 100 * (pred / causal - 1)})
    even = [{"row": c.name, "full_count": break_even_efficiency(c, params, c.published_time_s),
             "full_count_minus_10_percent": break_even_efficiency(c, params, 0.9 * c.published_time_s),
             "causal_count": break_even_efficiency(c, params, c.extra["causal_time_s"])}
            for c in cases if c.layout.cp > 1]
    return {"rows": rows, "break_even": even}
