"""The cost record of one node at one tensor-parallel degree t and TMPC: :class:`NodeCost`.

Its own module so that both pricers use the one record: :func:`piper.frontend.workload.node_costs`
(dense nodes) returns it, and :class:`piper.frontend.moe_costs.LayerCost` (MoE and MLA layers)
extends it with the expert keys (``workload`` imports ``moe_costs``, so the record cannot live in
either).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NodeCost"]


@dataclass(frozen=True)
class NodeCost:
    """The numbers of one node at one degree t and TMPC (seconds, bytes)."""

    tmpc_id: str
    time_per_sample_s: float
    compute_s: float
    communication_s: float
    params_per_device: float
    activation_bytes: float
    state_bytes: float
    sharded_state_bytes: float
    gradient_bytes: float
    #: forward / backward (with recomputation) time of one micro-batch, seconds
    forward_s: float = 0.0
    backward_s: float = 0.0
    #: bytes each device sends per pipeline transfer of this node's input or output
    p2p_bytes: float = 0.0
    #: the optimizer step over this node's parameters on one device, seconds per iteration (unsharded)
    step_s: float = 0.0
