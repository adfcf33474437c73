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
"""

from __future__ import annotations

import csv
from dataclasses import replace
from typing import Any

from experiments.validate.fit import least_recompute_score
from experiments.validate.rows import DATA_DIR, Case, llama3_case, llama3_layout, llama3_row
from piper.frontend.hardware import hardware
from piper.frontend.score import Layout

__all__ = ["CONTEXT_ASSUMPTIONS", "context_variants", "llama3_context_cases"]

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
