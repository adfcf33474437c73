"""Costs and TMPCs of the layers of mixture-of-experts and MLA models (docs/problem.md §11).

A transformer layer of a model with :class:`~piper.frontend.moe.MoEConfig` or
:class:`~piper.frontend.moe.MLAConfig` is priced as the dense layer of
:func:`piper.frontend.operations.layer_ops` with parts swapped:

* **MLA** (DeepSeek-V2/V3): the q/k/v projections, the rotary embedding, the core attention and the
  output projection are replaced by MLA's products: the down projections h -> q_lora and
  h -> kv_lora + d_rope held whole on every tensor-parallel device (Megatron-Core's MLA duplicates
  them over the TP group), their RMSNorms, the up projections q_lora -> a d_qk / t and
  kv_lora -> a (d_nope + d_v) / t, the rotary embedding, fused attention of
  2 b s^2 a (d_qk + d_v) / t FLOPs (causal: half; backward 2.5 x, as the dense flash kernel) and the
  output projection a d_v / t -> h. The tensor-parallel collectives stay those of the dense layer.
  MLA always uses the fused kernel and FP8 casts of its products are not priced.
* **MoE** (layers :func:`~piper.frontend.moe.is_moe_layer`): the MLP and its collectives are
  replaced, for an expert layout (e, e_t), by the router (a T_d x h by h x E product, its score
  and top-k: 16 bytes per logit), the permutation of the T_d k routed rows (2 p h bytes each),
  the dispatch all-to-all of T_d k h p bytes among the e devices of the expert-parallel group
  (and an all-gather over the e_t devices of an expert when e_t > 1), the experts' grouped
  products on the device's E / e experts, each receiving m = c T_d k e e_t / E rows
  (c: :attr:`MoEConfig.memory_capacity_factor`): m x h by h x (2 or 1) F / e_t and
  m x F / e_t by F / e_t x h, the activation, the combine (a reduce-scatter over e_t, the
  all-to-all back, the weighted sum of the k outputs) and the shared experts (a dense MLP of
  width F_shared split over t, with sequence parallelism's all-gather and reduce-scatter).
  T_d = b s / t tokens on each device (sequence parallelism: Megatron-Core requires it for MoE
  layers with t > 1, so MoE layers at t > 1 get only the ``+sp`` TMPCs). Backward: every product
  twice, every collective mirrored. Balanced routing (every expert gets k/E of the tokens); the
  total routed work per device, c T_d k (2 or 3) h F, does not depend on (e, e_t), only the
  product shapes and the communication do.

**All-to-all** (:func:`all_to_all_time_s`, Megatron-Core's default ``alltoall`` dispatcher, k
copies of each token): each of n devices keeps 1/n of its message and sends (n - 1)/n. Inside a
node (n <= G, the expert group on consecutive ranks as Megatron-Core's rank order tp-ep-dp puts
it) at the NVLink bandwidth with the all-to-all's own bus efficiency
(``Hardware.nvlink_all_to_all_efficiency``; nccl-tests' alltoall busbw = (n - 1)/n x algbw,
experiments/data/collective_bandwidth.md; the catalog's figures are DeepEP's, piper/frontend/hardware.py);
across nodes the (G - 1)/n to the device's own node goes over NVLink and the (n - G)/n to other
nodes over its network link (``network_all_to_all_efficiency``), concurrently: the time is the
slower of the two plus the network latency. With ``TrainingSetup.token_dispatcher = "flex"``
(``--moe-token-dispatcher-type flex``: DeepEP or HybridEP, which forward each token once per
destination node over the network and once per destination device over NVLink) the copies are
those expected under balanced uniform routing (:func:`flex_dispatch_time_s`,
:func:`expected_destinations`: a group of E / P experts holds one of a token's k experts with
probability 1 - C(E - E / P, k) / C(E, k)).

**Fitted terms** (``Hardware.expert_gemm_half_dim``, ``moe_token_overhead_s``,
``moe_layer_overhead_s``, ``expert_overhead_s``; the catalog's values and their rows: ``FITTED_MOE``
in piper/frontend/hardware.py): the experts' grouped products use their own d0 in the shape factor
(None: the dense products'), and each pass (forward, backward, recomputation) of an MoE layer
pays a time per routed token copy on the device (T k / t copies), a fixed time, and one per local
expert (E / e of them); the catalog's H100 fit sets the fixed time per layer (1.53 ms), the other two
are 0 (docs/results/validation.md compares the forms). With e_t > 1 the e members of an expert-parallel
group sit e_t apart (the expert-tensor-parallel group innermost), so the group spans e e_t devices
and a node holds G / e_t of its members once e e_t > G.

**Layouts** (:func:`expert_layouts`): e among the powers of two dividing E up to
``MAX_EXPERT_PARALLEL`` (64) and the devices; e_t = 1, and also e_t = t (when F divides by t)
with ``TrainingSetup.expert_tensor_parallel`` (``python -m piper score --etp`` turns it on;
planning leaves it off: the DP's time grows with the TMPC count, and e_t = 1 is the
Megatron-Bridge MoE recipes' and DeepSeek-V3's choice); e e_t at most the devices; only e =
``TrainingSetup.expert_parallel`` when it is set (the planner builds one workload per e, so that
a plan has one expert layout, as Megatron-LM runs). Rule 6 (e e_t divides d t) is the evaluator's.

**Memory and weights** per device: ``parameterSize`` = g x (the non-expert parameters per device:
attention, norms, router held whole, shared experts split by t), ``expertParameterSize`` w_x = g
x (E / e) x (one expert's parameters) / e_t (g = bytes per gradient element: what the expert
resync moves); ``memoryUsageB`` holds the p + g bytes of every weight (experts included);
``memoryUsageShardedExpertB`` s_x = 12 bytes of fp32 master weight and Adam moments per expert
parameter with the distributed optimizer (the evaluator splits it over the r = d t / (e e_t)
copies), else in ``memoryUsageB``. Activations: the dense layer's ([K22] Table 2, via
:func:`~piper.frontend.costs.layer_activation_bytes`) less its MLP tensors, plus the router's
fp32 probabilities (4 T_d E), the routed rows at the products' inputs (c T_d k e_t h q and
c T_d k e_t F / e_t q), the gated activation's input (c T_d k e_t (2 or 1) F / e_t p), the fp32
routing probability of each routed row (4 c T_d k e_t: Megatron-Core 0.13 and later multiply the
probabilities in the experts' activation, ``weighted_bias_swiglu``, which keeps them; the combine's
unpermutation then keeps no expert output, only its index map: Megatron-Core's CHANGELOG 0.13.0,
"moving the probs multiplication from unpermutation to activation function of GroupedMLP";
``token_dispatcher.py`` ``combine_postprocess``) and the shared experts' tensors;
MLA's latents (p (q_lora + kv_lora + d_rope) + q (q_lora + kv_lora) per token, on every TP device)
and its split tensors (p a (2 d_qk + d_v) + q a d_v + 4 a per token, / t). Full recomputation
keeps only the layer input, as for a dense layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from piper.core.errors import FrontendError
from piper.frontend import costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import FITTED_MOE, Hardware
from piper.frontend.moe import expert_params, is_moe_layer
from piper.frontend.node_cost import NodeCost
from piper.frontend.operations import (
    Kernels,
    Op,
    all_to_all_time_s,
    collective_time_s,
    elementwise_time_s,
    flash_attention_time_s,
    gemm_time_s,
    layer_ops,
    ops_time_s,
    optimizer_step_time_s,
)
from piper.frontend.recompute import DEFAULT_RECOMPUTE_MODULES, RecomputedParts, recomputed_parts
from piper.frontend.tmpc import expert_layout, expert_tmpc_id, parse_tmpc_id, tmpc_ids

__all__ = [
    "MAX_EXPERT_PARALLEL",
    "MLA_UP_PROJECTION_OPS",
    "MLP_OP_PREFIXES",
    "SHARED_EXPERT_OPS",
    "LayerCost",
    "all_to_all_time_s",
    "expected_destinations",
    "expert_layouts",
    "flex_dispatch_time_s",
    "layer_costs",
    "layer_tmpc_ops",
    "layer_variant",
    "mla_activation_bytes",
    "moe_activation_bytes",
    "moe_constants_caveat",
    "moe_micro_batch_caveat",
    "runner_up_moe_hardware",
    "special_layer_ops",
]

#: the largest expert-parallel degree offered (keeps the TMPC count small; DeepSeek-V3 trained with 64)
MAX_EXPERT_PARALLEL = 64
#: names of the dense layer's MLP operations (piper/frontend/operations.py) an MoE block replaces
MLP_OP_PREFIXES = ("fc1", "fc2", "ag.fc1", "rs.fc2", "ar.fc2", "ag.fc2", "rs.fc1", "ar.fc1", "swiglu", "gelu")
#: MLA's operations ``mla_up_proj`` recomputation runs again (piper/frontend/recompute.py): the up
#: projections with the latents' norms Transformer Engine fuses into them, and the rotary embedding
MLA_UP_PROJECTION_OPS = frozenset({"mla.q_norm", "mla.q_up", "mla.q", "mla.kv_norm", "mla.kv_up", "mla.rotary"})
#: the shared experts' forward operations (``shared_experts`` recomputation runs them again, collectives included)
SHARED_EXPERT_OPS = frozenset({"ag.shared", "shared.fc1.cast", "shared.fc1", "shared.act", "shared.fc2.cast",
                               "shared.fc2", "rs.shared"})
#: names of the dense layer's attention operations MLA replaces (the TP collectives stay)
ATTENTION_OP_PREFIXES = ("qkv", "rotary", "flash", "qk", "attn_v", "softmax", "attn_dropout", "proj")
#: bytes per router logit: fp32 logits written and read, scores written and read (4 + 4 + 4 + 4)
ROUTER_BYTES_PER_LOGIT = 16.0
#: Transformer Engine's FP8 amax history (piper/frontend/workload.py: DelayedScaling(amax_history_len=1024))
_AMAX_BYTES = 4 * 3 * 4 * 1024 * 4


@dataclass(frozen=True)
class LayerCost(NodeCost):
    """One TMPC of a layer: the fields of :class:`~piper.frontend.node_cost.NodeCost` and the four
    expert keys (seconds and bytes)."""

    #: e, e_t
    expert_parallel: int = 1
    expert_tensor_parallel: int = 1
    #: w_x: g x expert parameters per device, bytes
    expert_param_bytes: float = 0.0
    #: s_x: the experts' optimizer state per device before the split over r copies, bytes
    expert_sharded_bytes: float = 0.0


def layer_variant(cfg: TransformerConfig, kind: str, layer: int) -> str | None:
    """"moe" or "mla" for a transformer node this module prices, None for one
    :func:`piper.frontend.workload.node_costs` prices."""
    if kind != "transformer":
        return None
    if is_moe_layer(cfg.moe, layer):
        return "moe"
    return "mla" if cfg.mla is not None else None


def expert_layouts(cfg: TransformerConfig, t: int, max_devices: int,
                   tensor_parallel_experts: bool = True) -> list[tuple[int, int]]:
    """The (e, e_t) offered at tensor-parallel degree t (module docstring); without
    ``tensor_parallel_experts`` only e_t = 1, and only e_t = 1 for a model whose linear layers
    have biases (Megatron-Core's TransformerConfig: "Bias in MoE is only supported when ETP==1")."""
    if cfg.moe is None:
        return [(1, 1)]
    out = []
    ets = [1] + ([t] if tensor_parallel_experts and t > 1 and cfg.moe.expert_ffn_hidden_size % t == 0
                 and not cfg.linear_bias else [])
    e = 1
    while e <= min(MAX_EXPERT_PARALLEL, cfg.moe.experts, max_devices):
        if cfg.moe.experts % e == 0:
            out += [(e, et) for et in ets if e * et <= max_devices]
        e *= 2
    return out


def expected_destinations(experts: int, top_k: int, parts: int) -> float:
    """The expected number of the ``parts`` equal groups of experts (devices or nodes, each of
    E / parts experts) that hold at least one of a token's k distinct experts under balanced
    uniform routing: parts x (1 - C(E - E / parts, k) / C(E, k))."""
    if parts <= 1:
        return float(parts)
    miss = math.comb(experts - experts // parts, top_k) / math.comb(experts, top_k)
    return parts * (1.0 - miss)


def flex_dispatch_time_s(hw: Hardware, token_bytes: float, ranks: int, experts: int, top_k: int) -> float:
    """Seconds of one dispatch (or combine) of Megatron-Core's flex token dispatcher (DeepEP /
    HybridEP, module docstring): ``token_bytes`` = the bytes of all T_d tokens of the device, each
    sent once per node and per device holding one of its k experts. Over the network
    (N - 1) P_node copies, over NVLink N (g - 1) P_dev (direct and forwarded; g devices of the
    group per node, N = ranks / g nodes, P: :func:`expected_destinations` / parts), at the
    all-to-all efficiencies; the slower of the two plus the latency."""
    if ranks <= 1 or token_bytes <= 0:
        return 0.0
    g = min(ranks, hw.devices_per_node)
    nodes = ranks // g
    p_dev = expected_destinations(experts, top_k, ranks) / ranks
    nvlink = token_bytes * nodes * (g - 1) * p_dev / (hw.link_bandwidth("nvlink")
                                                       * hw.collective_efficiency("nvlink", "all_to_all"))
    if nodes == 1:
        return hw.link_latency_s("nvlink") + nvlink
    network = token_bytes * (expected_destinations(experts, top_k, nodes) * (nodes - 1) / nodes) / (
        hw.link_bandwidth("network") * hw.collective_efficiency("network", "all_to_all"))
    return hw.link_latency_s("network") + max(nvlink, network)


class _Ops:
    """Collects operations of one phase."""

    def __init__(self, hw: Hardware, phase: str) -> None:
        self.hw, self.phase, self.ops = hw, phase, []

    def gemm(self, name: str, m: float, n: float, k: float, precision: str = "bf16", batch: float = 1.0) -> None:
        if m <= 0 or n <= 0 or k <= 0:
            return
        self.ops.append(Op(name, self.phase, "gemm", gemm_time_s(self.hw, m, n, k, precision, batch),
                           flops=2.0 * m * n * k * batch))

    def linear(self, name: str, m: float, n: float, k: float, precision: str = "bf16", batch: float = 1.0) -> None:
        """Forward m x k . k x n; backward the input and weight gradients."""
        if self.phase == "backward":
            self.gemm(name + ".dgrad", m, k, n, precision, batch)
            self.gemm(name + ".wgrad", k, n, m, precision, batch)
        else:
            self.gemm(name, m, n, k, precision, batch)

    def elementwise(self, name: str, nbytes: float) -> None:
        if nbytes > 0:
            self.ops.append(Op(name, self.phase, "elementwise", elementwise_time_s(self.hw, nbytes), bytes=nbytes))

    def overhead(self, name: str, seconds: float) -> None:
        """A fixed time (kernel launches and host work that move no counted FLOPs or bytes)."""
        if seconds > 0:
            self.ops.append(Op(name, self.phase, "elementwise", seconds))

    def comm(self, name: str, seconds: float, nbytes: float) -> None:
        if seconds > 0:
            self.ops.append(Op(name, self.phase, "comm", seconds, bytes=nbytes, full_time_s=seconds))

    def attention(self, name: str, flops: float) -> None:
        self.ops.append(Op(name, self.phase, "attention", flash_attention_time_s(self.hw, flops), flops=flops))


def _mla_ops(cfg: TransformerConfig, hw: Hardware, t: int, phase: str, core_only: bool = False) -> list[Op]:
    """MLA's operations of one phase ("forward", "recompute" or "backward") for one micro-batch."""
    mla, a, h, p = cfg.mla, cfg.attention_heads, cfg.hidden_size, float(cfg.precision_bytes)
    assert mla is not None
    o = _Ops(hw, phase)
    T = cfg.micro_batch * cfg.seq_length
    fwd_flops = 2.0 * cfg.micro_batch * cfg.seq_length ** 2 * a * (mla.qk_head_dim + mla.v_head_dim) / t
    if core_only:
        o.attention("mla.flash", 0.5 * fwd_flops)
        return o.ops
    bwd = phase == "backward"
    norm = 3.0 if bwd else 2.0
    if mla.q_lora_rank:
        o.linear("mla.q_down", T, mla.q_lora_rank, h)
        o.elementwise("mla.q_norm", norm * p * T * mla.q_lora_rank)
        o.linear("mla.q_up", T, a * mla.qk_head_dim / t, mla.q_lora_rank)
    else:
        o.linear("mla.q", T, a * mla.qk_head_dim / t, h)
    o.linear("mla.kv_down", T, mla.kv_lora_rank + mla.qk_rope_head_dim, h)
    o.elementwise("mla.kv_norm", norm * p * T * mla.kv_lora_rank)
    o.linear("mla.kv_up", T, a * (mla.qk_nope_head_dim + mla.v_head_dim) / t, mla.kv_lora_rank)
    o.elementwise("mla.rotary", 2 * p * T * (a * mla.qk_rope_head_dim / t + mla.qk_rope_head_dim))
    o.attention("mla.flash", (2.5 if bwd else 1.0) * 0.5 * fwd_flops)
    o.linear("mla.proj", T, h, a * mla.v_head_dim / t)
    return o.ops


def _moe_ops(cfg: TransformerConfig, hw: Hardware, t: int, e: int, et: int, phase: str,
             dispatcher: str = "alltoall") -> list[Op]:
    """The MoE block's operations of one phase for one micro-batch on one device (module docstring)."""
    m_cfg, h, p = cfg.moe, cfg.hidden_size, float(cfg.precision_bytes)
    assert m_cfg is not None
    o = _Ops(hw, phase)
    bwd = phase == "backward"
    prec = "fp8" if cfg.precision == "fp8" else "bf16"
    c = m_cfg.memory_capacity_factor
    T = cfg.micro_batch * cfg.seq_length
    td = T / t
    k, E, F = m_cfg.top_k, m_cfg.experts, m_cfg.expert_ffn_hidden_size
    width = (2 if cfg.ffn_kind == "swiglu" else 1) * F / et
    rows = c * td * k * et  # routed rows this device's experts process
    m = rows / (E / e)  # rows per local expert
    dispatch = td * k * h * p  # bytes each device sends into (and gets back from) the all-to-all
    if dispatcher == "flex":
        a2a = flex_dispatch_time_s(hw, td * h * p, e, E, k)
    else:
        a2a = all_to_all_time_s(hw, dispatch, e, e * et)
    link = "nvlink" if e * et <= hw.devices_per_node else "network"
    gather = collective_time_s(hw, "all_gather", rows * h * p, et, link) if et > 1 else 0.0
    act_fwd = (3 if cfg.ffn_kind == "swiglu" else 2) * p * rows * F / et
    act_bwd = (5 if cfg.ffn_kind == "swiglu" else 3) * p * rows * F / et
    cast = (p + 2.0) if prec == "fp8" else 0.0
    # per-layer, per-expert and per-routed-token time (fitted constants, piper/frontend/hardware.py FITTED_MOE)
    o.overhead("moe.layer_overhead", hw.moe_layer_overhead_s)
    o.overhead("experts.overhead", hw.expert_overhead_s * E / e)
    o.overhead("moe.token_overhead", hw.moe_token_overhead_s * td * k)
    # router (bf16 product, fp32 score and top-k), permutation, dispatch
    o.linear("router", td, E, h)
    o.elementwise("router.topk", ROUTER_BYTES_PER_LOGIT * td * E)
    o.elementwise("permute", 2 * p * td * k * h)
    o.comm("a2a.dispatch" if not bwd else "a2a.dispatch.bwd", a2a, (e - 1) / e * dispatch)
    o.comm("ag.experts" if not bwd else "rs.experts.bwd", gather, (et - 1) / et * rows * h * p)
    o.elementwise("experts.fc1.cast", cast * rows * h)
    xo = _Ops(hw.with_changes(gemm_half_dim=hw.expert_gemm_half_dim), phase)  # None: the dense d0
    xo.linear("experts.fc1", m, width, h, prec, batch=E / e)
    o.ops += xo.ops
    xo.ops = []
    o.elementwise("experts.act" + (".bwd" if bwd else ""), act_bwd if bwd else act_fwd)
    o.elementwise("experts.fc2.cast", cast * rows * F / et)
    xo.linear("experts.fc2", m, h, F / et, prec, batch=E / e)
    o.ops += xo.ops
    o.comm("rs.experts" if not bwd else "ag.experts.bwd", gather, (et - 1) / et * rows * h * p)
    o.comm("a2a.combine" if not bwd else "a2a.combine.bwd", a2a, (e - 1) / e * dispatch)
    o.elementwise("unpermute", (k + 1) * p * td * h)
    # shared experts: a dense MLP split over t, with sequence parallelism's collectives
    fs = m_cfg.shared_ffn_hidden_size
    if fs:
        ws = (2 if cfg.ffn_kind == "swiglu" else 1) * fs / t
        msg = p * T * h
        o.comm("ag.shared" if not bwd else "ag.shared.bwd", collective_time_s(hw, "all_gather", msg, t),
               (t - 1) / t * msg)
        o.elementwise("shared.fc1.cast", cast * T * h)
        o.linear("shared.fc1", T, ws, h, prec)
        o.elementwise("shared.act" + (".bwd" if bwd else ""),
                      ((5 if cfg.ffn_kind == "swiglu" else 3) if bwd else (3 if cfg.ffn_kind == "swiglu" else 2))
                      * p * T * fs / t)
        o.elementwise("shared.fc2.cast", cast * T * fs / t)
        o.linear("shared.fc2", T, h, fs / t, prec)
        o.comm("rs.shared" if not bwd else "rs.shared.bwd", collective_time_s(hw, "reduce_scatter", msg, t),
               (t - 1) / t * msg)
    return o.ops


def _drop(ops: list[Op], prefixes: tuple[str, ...]) -> list[Op]:
    return [op for op in ops if not op.name.startswith(prefixes)]


def special_layer_ops(cfg: TransformerConfig, hw: Hardware, t: int, recompute: str, sp: bool, variant: str,
                      e: int = 1, et: int = 1, kernels: Kernels | None = None, window: int | None = None,
                      dispatcher: str = "alltoall", modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> list[Op]:
    """The operations of one MoE or MLA layer ("moe" / "mla", :func:`layer_variant`) for one
    micro-batch on one of t devices, expert layout (e, e_t); ``window``: the layer's sliding
    attention window (tokens; :func:`piper.frontend.operations.layer_ops`); ``modules``: what
    ``selective`` recomputes (piper/frontend/recompute.py)."""
    if variant not in ("moe", "mla"):
        raise FrontendError(f"layer variant must be moe or mla, got {variant!r}")
    moe_layer = variant == "moe"
    parts = _parts(cfg, recompute, modules, moe_layer)
    dense_modules = tuple(m for m in modules if not (moe_layer and m == "mlp"))
    ops = layer_ops(cfg, hw, t, recompute, sp, kernels or Kernels(), window, dense_modules)
    phases = ["forward", "backward"] + (["recompute"] if recompute == "full" else [])
    norm_bytes = 2.0 * cfg.precision_bytes * cfg.micro_batch * cfg.seq_length * cfg.hidden_size / (t if sp else 1)
    again = _Ops(hw, "recompute")
    if cfg.mla is not None:
        ops = _drop(ops, ATTENTION_OP_PREFIXES)
        for ph in phases:
            ops += _mla_ops(cfg, hw, t, ph)
        if parts.core_attention:
            ops += _mla_ops(cfg, hw, t, "recompute", core_only=True)
        if parts.mla_up_projection:
            ops += [op for op in _mla_ops(cfg, hw, t, "recompute") if op.name in MLA_UP_PROJECTION_OPS]
        if parts.input_norm:
            again.elementwise("norm1", norm_bytes)
    if moe_layer:
        ops = _drop(ops, MLP_OP_PREFIXES)
        for ph in phases:
            ops += _moe_ops(cfg, hw, t, e, et, ph, dispatcher)
        if parts.moe_block or parts.expert_activation or parts.shared_experts:
            block = _moe_ops(cfg, hw, t, e, et, "recompute", dispatcher)
            if parts.moe_block:
                ops += block
            # moe_act / shared_experts inside a recomputed block: Megatron-Core nests the checkpoints, so the
            # block's replay runs them once and their own recomputation once more (piper/frontend/recompute.py)
            ops += [op for op in block if (parts.expert_activation and op.name == "experts.act")
                    or (parts.shared_experts and op.name in SHARED_EXPERT_OPS)]
        if parts.pre_mlp_norm:
            again.elementwise("norm2", norm_bytes)
    return ops + again.ops


def _parts(cfg: TransformerConfig, recompute: str, modules: Sequence[str], moe_layer: bool) -> RecomputedParts:
    return recomputed_parts(recompute, modules, moe_layer=moe_layer, mla=cfg.mla is not None,
                            shared_experts=bool(cfg.moe is not None and cfg.moe.shared_ffn_hidden_size))


def mla_activation_bytes(cfg: TransformerConfig, t: int, parts: RecomputedParts = RecomputedParts()) -> float:
    """MLA's tensors kept per micro-batch on each of t devices minus the dense attention's
    (module docstring); 0 without MLA. ``parts.mla_up_projection`` (``mla_up_proj`` recomputation)
    frees the per-head Q, K and V the up projections and the rotary embedding write, and the outputs
    of the latents' norms, which Transformer Engine fuses into the up projections."""
    mla = cfg.mla
    if mla is None:
        return 0.0
    p, a = float(cfg.precision_bytes), cfg.attention_heads
    q = 1.0 if cfg.precision == "fp8" else p
    T = cfg.micro_batch * cfg.seq_length
    latents = p * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim) + q * (mla.q_lora_rank + mla.kv_lora_rank)
    split = p * a * (2 * mla.qk_head_dim + mla.v_head_dim) + q * a * mla.v_head_dim + 4.0 * a
    r = cfg.kv_heads / cfg.attention_heads
    qw = cfg.q_dim
    dense_split = p * (qw + 2 * r * qw) + q * qw + 4.0 * a  # Q, K, V, the projection's input, flash's log-sum-exp
    if parts.mla_up_projection:
        # the per-head Q, K, V and the latents' norm outputs (the up projections' inputs); the latents
        # themselves stay, the recomputation's inputs
        split -= p * a * (2 * mla.qk_head_dim + mla.v_head_dim)
        latents -= q * (mla.q_lora_rank + mla.kv_lora_rank)
    if cfg.precision == "fp8" and not parts.core_attention:
        # the fused kernel's BF16 output under FP8 (piper/frontend/costs.py _layer_activation_terms) is
        # a d_v wide per head here, not the dense layer's query width
        split += p * (a * mla.v_head_dim - qw)
    return T * (latents + (split - dense_split) / t)


def moe_activation_bytes(cfg: TransformerConfig, t: int, e: int, et: int,
                         parts: RecomputedParts = RecomputedParts()) -> float:
    """The MoE block's tensors kept per micro-batch on each device minus the dense MLP's (module
    docstring). The shared experts' FC1 input is the pre-MLP norm's output, which the router holds
    too (counted once, as the dense layer's FC1 input), except under FP8, where Transformer Engine
    keeps an FP8 copy of its own. Selective recomputation (``parts``, piper/frontend/recompute.py)
    frees: with ``moe`` every tensor of the block (its input, the norm's output, stays); with
    ``moe_act`` the experts' FC2 input (refused under FP8: Megatron-Core's delayed scaling); with
    ``shared_experts`` the shared experts' inner tensors and that FP8 copy."""
    m_cfg = cfg.moe
    assert m_cfg is not None
    p, h = float(cfg.precision_bytes), cfg.hidden_size
    q = 1.0 if cfg.precision == "fp8" else p
    T = cfg.micro_batch * cfg.seq_length
    td = T / t
    c = m_cfg.memory_capacity_factor
    gated = cfg.ffn_kind == "swiglu"
    inner = (2 * p + q) if gated else (p + q)  # per unit of width: the activation's input(s) and FC2's input
    dense_mlp = T * inner * cfg.ffn_hidden_size / t
    rows = c * td * m_cfg.top_k * et
    F = m_cfg.expert_ffn_hidden_size
    # router scores, FC1's input, the activation's inputs and FC2's input, each row's fp32 probability
    # (multiplied in the activation, which keeps it; the unpermutation keeps no expert output)
    routed = 4.0 * td * m_cfg.experts + rows * h * q + rows * inner * F / et + 4.0 * rows
    fp8_copy = td * h * q if (m_cfg.shared_ffn_hidden_size and cfg.precision == "fp8") else 0.0
    shared = T * inner * m_cfg.shared_ffn_hidden_size / t + fp8_copy
    if parts.moe_block:
        return -dense_mlp
    if parts.expert_activation:
        routed -= rows * q * F / et
    if parts.shared_experts:
        shared = 0.0
    return routed + shared - dense_mlp


def layer_tmpc_ops(cfg: TransformerConfig, hw: Hardware, setup: Any, t: int, variant: str, tmpc: str,
                   window: int | None = None) -> list[Op]:
    """The operations behind :func:`layer_costs`' TMPC ``tmpc`` at degree t, priced the same way (the
    context-parallel costs take the fused attention kernel's times from them)."""
    if setup.efficiency is not None:
        hw = hw.with_changes(gemm_efficiency=setup.efficiency)
    recompute, sp = parse_tmpc_id(tmpc)
    e, et = expert_layout(tmpc)
    return special_layer_ops(cfg, hw, t, recompute, sp, variant, e, et, setup.kernels(), window,
                             getattr(setup, "token_dispatcher", "alltoall"), setup.recompute_modules)


def layer_costs(cfg: TransformerConfig, hw: Hardware, setup: Any, t: int, variant: str,
                max_devices: int, window: int | None = None) -> list[LayerCost]:
    """The TMPCs of an MoE or MLA transformer layer at degree t (ids: :func:`expert_tmpc_id` for MoE
    layers, :func:`~piper.frontend.tmpc.tmpc_ids` for dense MLA layers); ``window``: its sliding
    attention window (tokens), None for full causal attention. ``setup`` is the
    :class:`piper.frontend.workload.TrainingSetup` (not imported: workload imports this module)."""
    if setup.efficiency is not None:
        hw = hw.with_changes(gemm_efficiency=setup.efficiency)
    p, g = cfg.precision_bytes, setup.grad_bytes
    kernels = setup.kernels()
    moe_layer = variant == "moe"
    if moe_layer:
        part, _ = costs.moe_layer_params(cfg)
        one_expert = expert_params(cfg.moe, cfg.hidden_size, cfg.ffn_matrices)  # type: ignore[arg-type]
    else:
        part, one_expert = costs.layer_params(cfg), 0
    params = part.per_device(t)
    ids = setup.offered(tmpc_ids(t), t)
    if moe_layer and t > 1:
        ids = [i for i in ids if i.endswith("+sp")]  # Megatron-Core: MoE with t > 1 needs sequence parallelism
    tp_experts = bool(getattr(setup, "expert_tensor_parallel", True))
    layouts = expert_layouts(cfg, t, max_devices, tp_experts) if moe_layer else [(1, 1)]
    only = getattr(setup, "expert_parallel", None)
    if only is not None and moe_layer:
        layouts = [(e, et) for e, et in layouts if e == only]
    if getattr(setup, "token_dispatcher", "alltoall") == "flex":
        # Megatron-Core's flex dispatcher asserts "Flex token dispatcher requires TPxEP > 1" (e_t x e)
        layouts = [(e, et) for e, et in layouts if e * et > 1]
    whole = p * cfg.micro_batch * cfg.seq_length * cfg.hidden_size
    out = []
    modules = setup.recompute_modules
    dense_modules = tuple(m for m in modules if not (moe_layer and m == "mlp"))
    q = 1.0 if cfg.precision == "fp8" else float(p)
    for tid in ids:
        recompute = tid.split("+")[0]
        sp = tid.endswith("+sp")
        parts = _parts(cfg, recompute, modules, moe_layer)
        # MLA always runs the fused kernel (module docstring), whatever the setup says
        act = costs.layer_activation_bytes(cfg, t, recompute, sp, setup.flash_attention or cfg.mla is not None,
                                           dense_modules)
        tokens_h = cfg.micro_batch * cfg.seq_length * cfg.hidden_size / (t if sp else 1)
        if moe_layer and recompute != "full":
            # the pre-MLP norm's output, counted by the dense terms as FC1's input (q bytes: under FP8 its
            # FP8 copy), is held by the router in BF16 (p bytes) here
            act += (p - q) * tokens_h
        # layernorm recomputation frees a separate norm's output: the MoE block's input (p bytes), an MLA
        # layer's down projections' input (q bytes, as counted)
        act -= p * tokens_h * int(parts.pre_mlp_norm) + q * tokens_h * int(parts.input_norm)
        for e, et in layouts:
            experts_here = one_expert * (cfg.moe.experts // e) / et if moe_layer else 0.0  # type: ignore[union-attr]
            ops = special_layer_ops(cfg, hw, t, recompute, sp, variant, e, et, kernels, window,
                                    getattr(setup, "token_dispatcher", "alltoall"), modules)
            keep = act
            if recompute != "full":
                keep += mla_activation_bytes(cfg, t, parts) + (moe_activation_bytes(cfg, t, e, et, parts)
                                                                if moe_layer else 0.0)
            fp8_extra = 0.0
            if cfg.precision == "fp8":
                fp8_extra = 2.0 * (part.matmul / t + experts_here) + _AMAX_BYTES
            optimizer = costs.OPTIMIZER_STATE_BYTES * params
            expert_optimizer = costs.OPTIMIZER_STATE_BYTES * experts_here
            grads, expert_grads = g * params, g * experts_here
            if setup.distributed_optimizer and setup.shard_gradients:
                optimizer, grads = optimizer + grads, 0.0
                expert_optimizer, expert_grads = expert_optimizer + expert_grads, 0.0
            state = p * (params + experts_here) + grads + expert_grads + fp8_extra
            if not setup.distributed_optimizer:
                state += optimizer + expert_optimizer
            comm = ops_time_s(ops, kind="comm")
            total = ops_time_s(ops)
            out.append(LayerCost(
                tmpc_id=expert_tmpc_id(recompute, sp, e, et) if moe_layer else tid,
                time_per_sample_s=total, compute_s=total - comm, communication_s=comm,
                params_per_device=params, activation_bytes=keep, state_bytes=state,
                sharded_state_bytes=optimizer if setup.distributed_optimizer else 0.0,
                gradient_bytes=g * params,
                forward_s=ops_time_s(ops, phase="forward"),
                backward_s=ops_time_s(ops, phase="backward") + ops_time_s(ops, phase="recompute"),
                p2p_bytes=whole / t if ((sp and t > 1) or setup.pipeline_scatter_gather) else whole,
                step_s=optimizer_step_time_s(hw, params + experts_here, p, g),
                expert_parallel=e, expert_tensor_parallel=et,
                expert_param_bytes=g * experts_here,
                expert_sharded_bytes=expert_optimizer if setup.distributed_optimizer else 0.0,
            ))
    return out


def moe_micro_batch_caveat(cfg: TransformerConfig, hw: Hardware, context_parallel: int = 1) -> str | None:
    """One line for a mixture-of-experts model priced with the catalog's fitted MoE-block constants
    (``FITTED_MOE``, the hardware file changed none of them) at a micro-batch of more tokens per
    context-parallel rank (b s / c) than any row they were fitted on (all at c = 1): how the unpriced
    MoE time grows with the micro-batch is then an extrapolation. A fixed time per layer and pass (the
    catalog's form) and a time per routed token fit the rows (leave-one-out mean absolute error 3.3% and
    5.8%, docs/results/validation.md) but part ways at larger micro-batches: the fixed time makes them
    look cheaper per token, and the rows hold one micro-batch of 4 sequences, the rest of 1. None otherwise."""
    fitted = FITTED_MOE.get(hw.name)
    if cfg.moe is None or fitted is None or not fitted.max_micro_batch_tokens:
        return None
    if any(getattr(hw, k) != v for k, v in fitted.hardware_fields().items()):
        return None  # the user's own constants
    tokens = cfg.micro_batch * cfg.seq_length // context_parallel
    if tokens <= fitted.max_micro_batch_tokens:
        return None
    where = "" if context_parallel == 1 else f" / c = {context_parallel}"
    return (f"micro-batch {cfg.micro_batch} x {cfg.seq_length}{where} = {tokens:,} tokens: the MoE-block constants "
            f"were fitted on at most {fitted.max_micro_batch_tokens:,} tokens per micro-batch, so how the MoE "
            f"layers' unpriced time grows with the micro-batch is extrapolated (docs/results/validation.md)")


def runner_up_moe_hardware(cfg: TransformerConfig, hw: Hardware) -> Hardware | None:
    """``hw`` with the runner-up MoE-block form fitted on the same rows (``FittedMoE.alternative``,
    piper/frontend/hardware.py) in place of the catalog's; None for a dense model, hardware without a
    fitted runner-up, or MoE constants the user set (they are not the catalog's). ``plan`` and ``score``
    price an answer with it too where the rows cannot decide the form (:func:`moe_micro_batch_caveat`)."""
    fitted = FITTED_MOE.get(hw.name)
    if cfg.moe is None or fitted is None or not fitted.alternative:
        return None
    if any(getattr(hw, k) != v for k, v in fitted.hardware_fields().items()):
        return None
    return hw.with_changes(**fitted.alternative_fields())


def moe_constants_caveat(cfg: TransformerConfig, hw: Hardware) -> str | None:
    """One line for a mixture-of-experts model on hardware without MoE-block constants (all three
    times 0: ``FITTED_MOE`` in piper/frontend/hardware.py holds H100 only, and the hardware file set
    none): the MoE layers' unpriced time, which the fit on H100 found to be 1.5 ms per MoE layer and
    pass, is then not charged, so the prediction is optimistic. None for a dense model or when any of
    them is set."""
    if cfg.moe is None or hw.moe_token_overhead_s > 0 or hw.moe_layer_overhead_s > 0 or hw.expert_overhead_s > 0:
        return None
    fitted = ", ".join(f"{name} ({_fitted_time_words(c)})" for name, c in FITTED_MOE.items())
    return (f"{hw.name} has no fitted MoE-block constants (fitted: {fitted}): the MoE layers' unpriced "
            f"time is not charged, so this prediction is optimistic; a hardware file can set "
            f"moe_token_overhead_s, moe_layer_overhead_s and expert_overhead_s (docs/results/validation.md)")


def _fitted_time_words(c: Any) -> str:
    """A :class:`~piper.frontend.hardware.FittedMoE`'s times in words ("1.53 ms per MoE layer and pass")."""
    parts = []
    if c.moe_layer_overhead_s:
        parts.append(f"{c.moe_layer_overhead_s * 1e3:.3g} ms per MoE layer and pass")
    if c.moe_token_overhead_s:
        parts.append(f"{c.moe_token_overhead_s * 1e9:.3g} ns per routed token copy and pass")
    if c.expert_overhead_s:
        parts.append(f"{c.expert_overhead_s * 1e6:.3g} us per local expert and pass")
    return ", ".join(parts) or "no time"

