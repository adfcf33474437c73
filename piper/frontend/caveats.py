"""What a prediction cannot vouch for: one line per reason, for ``plan`` and ``score`` to print
(``caveat`` lines; ``caveats`` in ``--json``)."""

from __future__ import annotations

from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware, unfitted_gemm_caveat
from piper.frontend.moe_costs import moe_constants_caveat, moe_micro_batch_caveat

__all__ = ["prediction_caveats"]


def prediction_caveats(cfg: TransformerConfig, hw: Hardware, context_parallel: int = 1) -> list[str]:
    """The caveats of predicting ``cfg`` on ``hw``: matrix products priced with unfitted catalog
    values (:func:`~piper.frontend.hardware.unfitted_gemm_caveat`), an MoE model without fitted
    MoE-block constants (:func:`~piper.frontend.moe_costs.moe_constants_caveat`) or with them at a
    micro-batch larger than they were fitted on (:func:`~piper.frontend.moe_costs.moe_micro_batch_caveat`:
    ``cfg.micro_batch`` and ``context_parallel`` are the plan's)."""
    return [line for line in (unfitted_gemm_caveat(hw), moe_constants_caveat(cfg, hw),
                              moe_micro_batch_caveat(cfg, hw, context_parallel)) if line is not None]
