"""What a prediction cannot vouch for: one line per reason, for ``plan`` and ``score`` to print
(``caveat`` lines; ``caveats`` in ``--json``)."""

from __future__ import annotations

import math
from typing import Any

from piper.frontend.config import TransformerConfig
from piper.frontend.context import layer_comm_types
from piper.frontend.hardware import FITTED_MOE, Hardware, unfitted_gemm_caveat
from piper.frontend.moe_costs import moe_constants_caveat, moe_micro_batch_caveat

__all__ = ["mla_context_caveat", "prediction_caveats", "runner_up_form_check"]


def mla_context_caveat(cfg: TransformerConfig, context_parallel: int, cp_comm_type: str | None) -> str | None:
    """A caveat for MLA layers under the all-to-all or all-gather context-parallel scheme: priced with
    MLA's widths, but Transformer Engine's 2025 releases refuse K and V of unequal widths there (they
    allow MLA under p2p and a2a+p2p only; docs/frontend.md says where this was read); None otherwise."""
    if cfg.mla is None or context_parallel == 1:
        return None
    schemes = sorted(set(layer_comm_types(cfg, cp_comm_type)) - {"p2p", "a2a+p2p"})
    if not schemes:
        return None
    return (f"multi-head latent attention with --cp-comm-type {'/'.join(schemes)}: priced with MLA's K and V widths, "
            "but Transformer Engine's 2025 releases allow MLA under context parallelism with p2p or a2a+p2p only "
            "(its 2026 tests also run a2a and all_gather with the fused attention backend): check the version you "
            "run, or pass --cp-comm-type p2p or a2a+p2p")


def prediction_caveats(cfg: TransformerConfig, hw: Hardware, context_parallel: int = 1,
                       cp_comm_type: str | None = None) -> list[str]:
    """The caveats of predicting ``cfg`` on ``hw``: matrix products priced with unfitted catalog
    values (:func:`~piper.frontend.hardware.unfitted_gemm_caveat`), an MoE model without fitted
    MoE-block constants (:func:`~piper.frontend.moe_costs.moe_constants_caveat`) or with them at a
    micro-batch larger than they were fitted on (:func:`~piper.frontend.moe_costs.moe_micro_batch_caveat`:
    ``cfg.micro_batch`` and ``context_parallel`` are the plan's), MLA under an unchecked
    context-parallel scheme (:func:`mla_context_caveat`)."""
    return [line for line in (unfitted_gemm_caveat(hw), moe_constants_caveat(cfg, hw),
                              moe_micro_batch_caveat(cfg, hw, context_parallel),
                              mla_context_caveat(cfg, context_parallel, cp_comm_type)) if line is not None]


def runner_up_form_check(hw: Hardware, own_s: float, other_s: float | None, what: str) -> tuple[dict[str, Any], str]:
    """``moe_form_check`` (``--json``) and its caveat line for an answer of ``own_s`` seconds that the runner-up
    MoE form fitted on the same rows (``FittedMoE.alternative`` of ``hw``) prices at ``other_s`` (None or
    inf: it does not fit); ``what``: "plan" or "layout"."""
    words = FITTED_MOE[hw.name].alternative_words
    fits = other_s is not None and math.isfinite(other_s)
    change = other_s / own_s - 1.0 if fits else None  # type: ignore[operator]
    line = (f"under the runner-up MoE form fitted on the same rows ({words}) this {what} "
            + (f"takes {other_s:.4g} s ({change:+.1%} against {own_s:.4g} s)" if fits else "does not fit"))
    return {"form": words, "batch_time_s": other_s, "change": change}, line
