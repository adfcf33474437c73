"""Per-operation time of one transformer layer (and of the embedding, final norm and output head),
forward and backward, on one device of a tensor-parallel group.

Every operation is one of four kinds, priced by the device's numbers (:class:`~piper.frontend.hardware.Hardware`):

* **matrix product** (m x k times k x n, ``batch`` of them): 2 m n k FLOPs at
  ``peak x eta(m, n, k)`` where the efficiency

      eta(m, n, k) = min( e_max * prod_{x in m, n, k} x / (x + d0),   I(m, n, k) * BW * e_mem / peak )

  is the shape factor (small and thin products run far below peak: a dimension of d0 halves
  the rate) capped by the roofline (I = FLOPs per byte of the operands and the result;
  Williams et al., "Roofline", CACM 2009). It is non-decreasing in m, n and k, and at most
  e_max <= 1. e_max = ``Hardware.gemm_efficiency``, d0 = ``Hardware.gemm_half_dim``.
  FP8 products run at the FP8 peak (``Hardware.peak_flops_fp8``) with one byte per operand.
* **element-wise** (norms, activations, softmax, dropout, residual adds, rotary embedding,
  casts, cross-entropy): its bytes read + written / (HBM bandwidth x ``memory_efficiency``).
* **fused attention** (flash attention; Dao et al., FlashAttention-2, 2023): the FLOPs it
  executes (causal: half of 4 b s^2 h / t forward; backward 2.5 x forward, FlashAttention-2
  Section 3.1: five products against two) at ``peak x flash_attention_efficiency``. A layer with
  a sliding window of w tokens (GPT-OSS: w = 128 on every other layer; Mistral / Gemma style,
  HF ``sliding_window`` and ``layer_types``) computes only the band of its w latest keys:
  (w s - w^2 / 2) / s^2 of 4 b s^2 h / t (:func:`attention_score_fraction`). The unfused path
  (no flash attention) materializes the whole s x s score tensor and masks it: no discount.
* **collective** (NCCL, over NVLink inside a node): latency + the bus bytes / (link bandwidth
  x the collective's bus efficiency), with nccl-tests' bus-bandwidth convention
  (nccl-tests; experiments/data/collective_bandwidth.md): an all-reduce of S bytes over n ranks moves
  2 (n - 1)/n S per device, a reduce-scatter or all-gather (n - 1)/n S.

Every kernel also pays ``Hardware.kernel_overhead_s`` (launch and tail).

Which operations a layer runs (Megatron-LM's GPT layer; Shoeybi et al. 2019, Figure 2 and
Narayanan et al. SC'21 Section 3.2 for the tensor-parallel split; Korthikanti et al. 2022
Section 4.2.2 for sequence parallelism): norm -> QKV (column-parallel) -> [rotary] -> core
attention (QK^T, scale+mask+softmax, dropout, attention x V; or one flash kernel) -> output
projection (row-parallel) -> all-reduce (or reduce-scatter with sequence parallelism) ->
bias + dropout + residual add -> norm -> FC1 (GELU: h -> f; SwiGLU: h -> 2f) -> activation ->
FC2 -> all-reduce (or reduce-scatter) -> bias + dropout + residual add; with sequence
parallelism an all-gather before QKV and before FC1. Backward: each product twice (input
gradient, weight gradient), each element-wise op again with its saved inputs, each
collective mirrored (all-reduce <-> all-reduce; all-gather <-> reduce-scatter).
Full recomputation runs the forward pass again in the backward pass (its collectives too);
selective recomputation runs again the modules the setup names (piper/frontend/recompute.py):
by default the core attention (Korthikanti et al. Section 5), with ``mlp`` the dense MLP too.

With ``tp_comm_overlap`` (Megatron's ``--tp-comm-overlap``, Transformer Engine userbuffers;
sequence parallelism only) each all-gather / reduce-scatter runs concurrently with the
product it feeds or follows: only max(0, collective - product) is exposed.

Times are seconds for ONE micro-batch (b sequences) on each of the t devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piper.core.errors import FrontendError
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.recompute import DEFAULT_RECOMPUTE_MODULES, recomputed_parts

__all__ = [
    "ADAM_STEP_BYTES_PER_PARAM",
    "Kernels",
    "Op",
    "all_to_all_time_s",
    "attention_score_fraction",
    "collective_time_s",
    "elementwise_time_s",
    "embedding_ops",
    "final_norm_ops",
    "flash_attention_time_s",
    "gemm_efficiency",
    "gemm_time_s",
    "head_ops",
    "layer_ops",
    "node_ops",
    "ops_time_s",
    "optimizer_step_time_s",
]

#: kinds of node with operations
NODE_KINDS = ("embedding", "transformer", "final_norm", "output_head")


@dataclass(frozen=True)
class Kernels:
    """How the framework runs the layer (the training setup's switches that change kernels)."""

    #: fused (flash) attention: no s^2 score tensor, half the FLOPs under the causal mask
    flash_attention: bool = True
    #: tensor-parallel all-gathers / reduce-scatters overlapped with their products (sequence parallelism)
    tp_comm_overlap: bool = False


@dataclass(frozen=True)
class Op:
    """One operation of one micro-batch on one device."""

    #: e.g. "qkv", "qkv.dgrad", "softmax.bwd", "ar.proj"
    name: str
    #: "forward", "backward" or "recompute" (the extra forward work of recomputation, run in the backward pass)
    phase: str
    #: "gemm", "elementwise", "attention" or "comm"
    kind: str
    #: seconds this operation adds to the micro-batch (for an overlapped collective: its exposed part)
    time_s: float
    #: FLOPs executed (products and fused attention)
    flops: float = 0.0
    #: bytes read + written (element-wise) or bus bytes per device (collective)
    bytes: float = 0.0
    #: the collective's own time when it is overlapped (seconds; = time_s otherwise)
    full_time_s: float = 0.0


# ---------------------------------------------------------------------------------
# kernel prices
# ---------------------------------------------------------------------------------


def _peak_and_bytes(hw: Hardware, precision: str) -> tuple[float, float]:
    return (hw.peak("fp8"), 1.0) if precision == "fp8" else (hw.peak_flops, 2.0)


def gemm_efficiency(hw: Hardware, m: float, n: float, k: float, precision: str = "bf16") -> float:
    """eta(m, n, k) of the module docstring: the fraction of peak an m x k by k x n product reaches."""
    if min(m, n, k) <= 0:
        raise FrontendError(f"matrix product with a non-positive dimension: {m} x {k} x {n}")
    d0 = hw.gemm_half_dim
    shape = hw.gemm_efficiency
    for x in (m, n, k):
        shape *= x / (x + d0)
    peak, elem = _peak_and_bytes(hw, precision)
    if hw.memory_bandwidth is None:
        return shape
    # operands in the product's precision, the result in 2 bytes
    intensity = 2.0 * m * n * k / (elem * (m * k + k * n) + 2.0 * m * n)
    return min(shape, intensity * hw.memory_bandwidth * hw.memory_efficiency / peak)


def gemm_time_s(hw: Hardware, m: float, n: float, k: float, precision: str = "bf16", batch: float = 1.0) -> float:
    """Seconds of ``batch`` products m x k by k x n."""
    peak, _ = _peak_and_bytes(hw, precision)
    return batch * 2.0 * m * n * k / (peak * gemm_efficiency(hw, m, n, k, precision)) + hw.kernel_overhead_s


def elementwise_time_s(hw: Hardware, nbytes: float) -> float:
    """Seconds of an element-wise kernel that reads and writes ``nbytes`` in all (0 without an HBM bandwidth)."""
    if hw.memory_bandwidth is None:
        return 0.0
    return nbytes / (hw.memory_bandwidth * hw.memory_efficiency) + hw.kernel_overhead_s


def collective_time_s(hw: Hardware, collective: str, message_bytes: float, ranks: int, link: str = "nvlink") -> float:
    """Seconds of an NCCL ``collective`` ("all_reduce", "reduce_scatter", "all_gather", "p2p") of a
    ``message_bytes`` tensor (the whole tensor: the all-gather's output, the reduce-scatter's input)
    among ``ranks`` devices over ``link``; 0 for one rank."""
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    factor = {"all_reduce": 2.0 * (ranks - 1) / ranks, "reduce_scatter": (ranks - 1) / ranks,
              "all_gather": (ranks - 1) / ranks, "p2p": 1.0}[collective]
    bus = hw.link_bandwidth(link) * hw.collective_efficiency(link, collective)
    return hw.link_latency_s(link) + factor * message_bytes / bus


def all_to_all_time_s(hw: Hardware, message_bytes: float, ranks: int, span: int | None = None) -> float:
    """Seconds of an all-to-all in which each of ``ranks`` devices holds ``message_bytes``
    (piper/frontend/moe_costs.py's docstring, "All-to-all"). ``span``: the consecutive devices the
    group's members are spread over (e e_t for the expert-parallel group, whose members sit e_t
    apart: Megatron-Core's expert rank order puts the expert-tensor-parallel group innermost; t_tensor
    c for the context-parallel group, t_tensor apart); default ``ranks``. When the span exceeds a
    node, each node holds ranks G / span members."""
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    span = ranks if span is None else span
    g = min(hw.devices_per_node * ranks // span, ranks) if span > hw.devices_per_node else ranks

    def share(link: str, fraction: float) -> float:
        return fraction * message_bytes / (hw.link_bandwidth(link) * hw.collective_efficiency(link, "all_to_all"))

    if ranks <= g:  # the whole group inside one node
        return hw.link_latency_s("nvlink") + share("nvlink", (ranks - 1) / ranks)
    return hw.link_latency_s("network") + max(share("nvlink", (g - 1) / ranks), share("network", (ranks - g) / ranks))


#: bytes one Adam step reads and writes per parameter of fp32 state, besides the gradient and
#: the weight: fp32 master weight, momentum and variance, each read and written (Kingma & Ba 2015;
#: Megatron's fused Adam)
ADAM_STEP_BYTES_PER_PARAM = 24.0


def optimizer_step_time_s(hw: Hardware, params: float, weight_bytes: float, grad_bytes: float) -> float:
    """Seconds of the Adam step over ``params`` parameters on one device: a memory-bound sweep
    reading the gradient twice (norm for clipping, then the update), the fp32 state
    (:data:`ADAM_STEP_BYTES_PER_PARAM`), and writing the low-precision weight."""
    if params <= 0:
        return 0.0
    return elementwise_time_s(hw, params * (2 * grad_bytes + ADAM_STEP_BYTES_PER_PARAM + weight_bytes))


# ---------------------------------------------------------------------------------
# operation lists
# ---------------------------------------------------------------------------------


class _Builder:
    """Collects the operations of one node for one micro-batch."""

    def __init__(self, cfg: TransformerConfig, hw: Hardware, t: int, sp: bool, kernels: Kernels,
                 window: int | None = None) -> None:
        self.cfg, self.hw, self.t, self.sp, self.kernels = cfg, hw, t, sp, kernels
        #: the layer's sliding attention window, tokens (None: full causal attention)
        self.window = window
        self.ops: list[Op] = []
        self.p = float(cfg.precision_bytes)
        self.tokens = cfg.micro_batch * cfg.seq_length
        # tokens of the tensors that sequence parallelism splits (norms, dropout, residual)
        self.rep_tokens = self.tokens / t if sp else self.tokens

    def gemm(self, name: str, phase: str, m: float, n: float, k: float, precision: str = "bf16",
             batch: float = 1.0) -> Op:
        op = Op(name, phase, "gemm", gemm_time_s(self.hw, m, n, k, precision, batch), flops=2.0 * m * n * k * batch)
        self.ops.append(op)
        return op

    def linear(self, name: str, phase: str, m: float, n: float, k: float, fp8: bool) -> list[Op]:
        """A linear layer's products: forward (m x k . k x n); backward: input gradient (m x n . n x k)
        and weight gradient (k x m . m x n)."""
        prec = "fp8" if fp8 else "bf16"
        if phase == "backward":
            return [self.gemm(name + ".dgrad", phase, m, k, n, prec), self.gemm(name + ".wgrad", phase, k, n, m, prec)]
        return [self.gemm(name, phase, m, n, k, prec)]

    def elementwise(self, name: str, phase: str, nbytes: float) -> None:
        self.ops.append(Op(name, phase, "elementwise", elementwise_time_s(self.hw, nbytes), bytes=nbytes))

    def comm(self, name: str, phase: str, collective: str, message_bytes: float, hide_behind: list[Op] | None = None) -> None:
        full = collective_time_s(self.hw, collective, message_bytes, self.t)
        if full <= 0:
            return
        exposed = full
        if hide_behind and self.kernels.tp_comm_overlap and self.sp:
            exposed = max(0.0, full - sum(o.time_s for o in hide_behind))
        factor = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}[collective] * (self.t - 1) / self.t
        self.ops.append(Op(name, phase, "comm", exposed, bytes=factor * message_bytes, full_time_s=full))

    def attention(self, name: str, phase: str, flops: float) -> None:
        self.ops.append(Op(name, phase, "attention", flash_attention_time_s(self.hw, flops), flops=flops))


def _fp8_cast(b: _Builder, name: str, phase: str, elements: float) -> None:
    """Transformer Engine's cast(-transpose) of a product's input to FP8: read p, write 1 + 1 (transpose)."""
    if b.cfg.precision == "fp8":
        b.elementwise(name + ".cast", phase, elements * (b.p + 2.0))


def flash_attention_time_s(hw: Hardware, flops: float) -> float:
    """Seconds of one fused attention kernel executing ``flops``: at ``peak x
    flash_attention_efficiency``, plus the kernel overhead (module docstring)."""
    return flops / (hw.peak_flops * hw.flash_attention_efficiency) + hw.kernel_overhead_s


def attention_score_fraction(s: int, window: int | None = None) -> float:
    """The fraction of the s x s score matrix a causal fused-attention kernel computes: 1/2 (the
    causal half) without a window; with a sliding window of w tokens the band of the w latest keys,
    (w s - w^2 / 2) / s^2 with w = min(w, s) (= 1/2 at w = s). Useful pairs, as for the causal half:
    the kernel's tiles that straddle the band's edges are not counted."""
    if window is None or window >= s:
        return 0.5
    return window / s - window * window / (2.0 * s * s)


def _core_attention(b: _Builder, phase: str) -> None:
    """QK^T, softmax, dropout, attention x V (or one flash kernel) for one micro-batch, forward (phase
    "forward" or "recompute") or backward."""
    cfg, t = b.cfg, b.t
    s, hd = cfg.seq_length, cfg.head_dim
    heads = cfg.micro_batch * cfg.attention_heads / t  # query heads on this device, times b
    fwd_flops = 4.0 * cfg.micro_batch * s * s * cfg.q_dim / t
    if b.kernels.flash_attention:
        # causal mask: the kernel skips the upper half; a sliding window, all but a band
        share = attention_score_fraction(s, b.window)
        if phase == "backward":
            b.attention("flash.bwd", phase, 2.5 * share * fwd_flops)
        else:
            b.attention("flash", phase, share * fwd_flops)
        return
    scores = heads * s * s  # elements of the score tensor
    drop = cfg.dropout
    if phase == "backward":
        b.gemm("attn_v.dgrad", phase, s, hd, s, batch=2 * heads)  # d(probs) and d(V): two products per head
        if drop:
            b.elementwise("attn_dropout.bwd", phase, scores * (2 * b.p + 1))
        b.elementwise("softmax.bwd", phase, scores * 3 * b.p)
        b.gemm("qk.dgrad", phase, s, hd, s, batch=2 * heads)  # dQ and dK
        return
    b.gemm("qk", phase, s, s, hd, batch=heads)
    b.elementwise("softmax", phase, scores * 2 * b.p)  # fused scale + mask + softmax
    if drop:
        b.elementwise("attn_dropout", phase, scores * (2 * b.p + 1))
    b.gemm("attn_v", phase, s, hd, s, batch=heads)


def _layer_forward(b: _Builder, phase: str) -> None:
    cfg, t, p = b.cfg, b.t, b.p
    h, T, Tr = cfg.hidden_size, b.tokens, b.rep_tokens
    fp8 = cfg.precision == "fp8"
    msg = p * T * h  # the full activation tensor, bytes
    qkv_n = (cfg.q_dim + 2 * cfg.kv_dim) / t
    mask = 1.0 if cfg.dropout else 0.0
    b.elementwise("norm1", phase, 2 * p * Tr * h)
    _fp8_cast(b, "qkv", phase, Tr * h)
    qkv = b.linear("qkv", phase, T, qkv_n, h, fp8)
    if b.sp:
        b.comm("ag.qkv", phase, "all_gather", msg, qkv)
    if not cfg.learned_positions:  # rotary embedding on q and k
        b.elementwise("rotary", phase, 2 * p * T * (cfg.q_dim + cfg.kv_dim) / t)
    _core_attention(b, phase)
    _fp8_cast(b, "proj", phase, T * cfg.q_dim / t)
    proj = b.linear("proj", phase, T, h, cfg.q_dim / t, fp8)
    b.comm("rs.proj" if b.sp else "ar.proj", phase, "reduce_scatter" if b.sp else "all_reduce", msg, proj)
    b.elementwise("bias_dropout_add1", phase, (3 * p + mask) * Tr * h)
    _mlp_forward(b, phase)
    b.elementwise("bias_dropout_add2", phase, (3 * p + mask) * Tr * h)


def _mlp_forward(b: _Builder, phase: str) -> None:
    """The dense MLP's forward operations: its norm (fused into FC1 by Transformer Engine), FC1
    (with sequence parallelism's all-gather), the activation, FC2 and its all-reduce (reduce-scatter);
    phase "recompute": Megatron-Core's ``mlp`` recomputation (piper/frontend/recompute.py)."""
    cfg, t, p = b.cfg, b.t, b.p
    h, T, Tr = cfg.hidden_size, b.tokens, b.rep_tokens
    fp8 = cfg.precision == "fp8"
    msg = p * T * h
    mlp_n = (2 if cfg.ffn_kind == "swiglu" else 1) * cfg.ffn_hidden_size / t
    f_local = cfg.ffn_hidden_size / t
    b.elementwise("norm2", phase, 2 * p * Tr * h)
    _fp8_cast(b, "fc1", phase, Tr * h)
    fc1 = b.linear("fc1", phase, T, mlp_n, h, fp8)
    if b.sp:
        b.comm("ag.fc1", phase, "all_gather", msg, fc1)
    act_bytes = (3 if cfg.ffn_kind == "swiglu" else 2) * p * T * f_local
    b.elementwise("swiglu" if cfg.ffn_kind == "swiglu" else "gelu", phase, act_bytes)
    _fp8_cast(b, "fc2", phase, T * f_local)
    fc2 = b.linear("fc2", phase, T, h, f_local, fp8)
    b.comm("rs.fc2" if b.sp else "ar.fc2", phase, "reduce_scatter" if b.sp else "all_reduce", msg, fc2)


def _layer_backward(b: _Builder) -> None:
    cfg, t, p = b.cfg, b.t, b.p
    h, T, Tr = cfg.hidden_size, b.tokens, b.rep_tokens
    fp8 = cfg.precision == "fp8"
    ph = "backward"
    msg = p * T * h
    qkv_n = (cfg.q_dim + 2 * cfg.kv_dim) / t
    mlp_n = (2 if cfg.ffn_kind == "swiglu" else 1) * cfg.ffn_hidden_size / t
    f_local = cfg.ffn_hidden_size / t
    mask = 1.0 if cfg.dropout else 0.0
    # MLP block, in reverse: residual/dropout grad, (all-gather of the gradient), FC2, activation, FC1, (reduce-scatter or all-reduce), norm
    b.elementwise("bias_dropout_add2.bwd", ph, (5 * p + mask) * Tr * h)
    _fp8_cast(b, "fc2.grad", ph, T * h)
    fc2 = b.linear("fc2", ph, T, h, f_local, fp8)
    if b.sp:
        b.comm("ag.fc2.bwd", ph, "all_gather", msg, fc2[:1])
    act_bytes = (5 if cfg.ffn_kind == "swiglu" else 3) * p * T * f_local
    b.elementwise(("swiglu" if cfg.ffn_kind == "swiglu" else "gelu") + ".bwd", ph, act_bytes)
    _fp8_cast(b, "fc1.grad", ph, T * mlp_n)
    fc1 = b.linear("fc1", ph, T, mlp_n, h, fp8)
    b.comm("rs.fc1.bwd" if b.sp else "ar.fc1.bwd", ph, "reduce_scatter" if b.sp else "all_reduce", msg, fc1[1:])
    b.elementwise("norm2.bwd", ph, 3 * p * Tr * h)
    # attention block
    b.elementwise("bias_dropout_add1.bwd", ph, (5 * p + mask) * Tr * h)
    _fp8_cast(b, "proj.grad", ph, T * h)
    proj = b.linear("proj", ph, T, h, cfg.q_dim / t, fp8)
    if b.sp:
        b.comm("ag.proj.bwd", ph, "all_gather", msg, proj[:1])
    _core_attention(b, ph)
    if not cfg.learned_positions:
        b.elementwise("rotary.bwd", ph, 2 * p * T * (cfg.q_dim + cfg.kv_dim) / t)
    _fp8_cast(b, "qkv.grad", ph, T * qkv_n)
    qkv = b.linear("qkv", ph, T, qkv_n, h, fp8)
    b.comm("rs.qkv.bwd" if b.sp else "ar.qkv.bwd", ph, "reduce_scatter" if b.sp else "all_reduce", msg, qkv[1:])
    b.elementwise("norm1.bwd", ph, 3 * p * Tr * h)


def layer_ops(cfg: TransformerConfig, hw: Hardware, t: int, recompute: str, sp: bool,
              kernels: Kernels = Kernels(), window: int | None = None,
              modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> list[Op]:
    """The operations of one transformer layer for one micro-batch on one of t devices (``window``:
    the layer's sliding attention window in tokens, :meth:`TransformerConfig.attention_window`;
    ``modules``: what ``selective`` recomputes, piper/frontend/recompute.py: here the core attention
    and the dense MLP)."""
    if recompute not in ("none", "selective", "full"):
        raise FrontendError(f"recompute must be one of none, selective, full, got {recompute!r}")
    b = _Builder(cfg, hw, t, sp and t > 1, kernels, window)
    _layer_forward(b, "forward")
    if recompute == "full":
        _layer_forward(b, "recompute")
    parts = recomputed_parts(recompute, modules, moe_layer=False, mla=False)
    if parts.core_attention:
        _core_attention(b, "recompute")
    if parts.dense_mlp:
        _mlp_forward(b, "recompute")
    _layer_backward(b)
    return b.ops


def embedding_ops(cfg: TransformerConfig, hw: Hardware, t: int, sp: bool, kernels: Kernels = Kernels()) -> list[Op]:
    """Vocabulary-parallel embedding lookup (each device looks up its V/t rows), all-reduce (or
    reduce-scatter) of the b x s x h result, position add and dropout; backward: the gradient's
    scatter-add into the embedding table."""
    b = _Builder(cfg, hw, t, sp and t > 1, kernels)
    p, h, T, Tr = b.p, cfg.hidden_size, b.tokens, b.rep_tokens
    b.elementwise("lookup", "forward", 2 * p * T * h)
    b.comm("rs.embedding" if b.sp else "ar.embedding", "forward", "reduce_scatter" if b.sp else "all_reduce", p * T * h)
    extra = (p if cfg.learned_positions else 0.0) + (1.0 if cfg.dropout else 0.0)
    if extra:
        b.elementwise("position_dropout", "forward", (2 * p + extra) * Tr * h)
    if b.sp:
        b.comm("ag.embedding.bwd", "backward", "all_gather", p * T * h)
    b.elementwise("lookup.bwd", "backward", 2 * p * T * h)
    return b.ops


def final_norm_ops(cfg: TransformerConfig, hw: Hardware, t: int, sp: bool, kernels: Kernels = Kernels()) -> list[Op]:
    b = _Builder(cfg, hw, t, sp and t > 1, kernels)
    b.elementwise("final_norm", "forward", 2 * b.p * b.rep_tokens * cfg.hidden_size)
    b.elementwise("final_norm.bwd", "backward", 3 * b.p * b.rep_tokens * cfg.hidden_size)
    return b.ops


#: bytes per logit of Megatron-LM's vocabulary-parallel cross-entropy (``tensor_parallel/cross_entropy.py``):
#: forward: read the bf16 logits and write fp32 (2 + 4), max (4), subtract and exp (4 + 4), sum (4),
#: divide in place (4 + 4); backward: read the fp32 softmax, write the bf16 gradient (4 + 2)
CROSS_ENTROPY_BYTES = (30.0, 6.0)


def head_ops(cfg: TransformerConfig, hw: Hardware, t: int, sp: bool, kernels: Kernels = Kernels()) -> list[Op]:
    """The output layer: (all-gather with sequence parallelism), logits (column-parallel, BF16),
    vocabulary-parallel cross-entropy; backward: its gradient, the two products, (reduce-scatter
    or all-reduce of the input gradient)."""
    b = _Builder(cfg, hw, t, sp and t > 1, kernels)
    p, h, T = b.p, cfg.hidden_size, b.tokens
    v_local = cfg.vocab_size / t
    logits = b.linear("logits", "forward", T, v_local, h, False)
    if b.sp:
        b.comm("ag.logits", "forward", "all_gather", p * T * h, logits)
    b.elementwise("cross_entropy", "forward", CROSS_ENTROPY_BYTES[0] * T * v_local)
    b.elementwise("cross_entropy.bwd", "backward", CROSS_ENTROPY_BYTES[1] * T * v_local)
    back = b.linear("logits", "backward", T, v_local, h, False)
    b.comm("rs.logits.bwd" if b.sp else "ar.logits.bwd", "backward", "reduce_scatter" if b.sp else "all_reduce",
           p * T * h, back[1:])
    return b.ops


def node_ops(kind: str, cfg: TransformerConfig, hw: Hardware, t: int, recompute: str, sp: bool,
             kernels: Kernels = Kernels(), window: int | None = None,
             modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> list[Op]:
    """The operations of a node of ``kind`` (embedding, transformer, final_norm, output_head);
    ``window``: a transformer layer's sliding attention window (tokens); ``modules``: what a
    transformer layer's ``selective`` recomputes (:func:`layer_ops`)."""
    if kind == "transformer":
        return layer_ops(cfg, hw, t, recompute, sp, kernels, window, modules)
    if kind == "embedding":
        return embedding_ops(cfg, hw, t, sp, kernels)
    if kind == "final_norm":
        return final_norm_ops(cfg, hw, t, sp, kernels)
    if kind == "output_head":
        return head_ops(cfg, hw, t, sp, kernels)
    raise FrontendError(f"unknown node kind {kind!r}; known: {', '.join(NODE_KINDS)}")


def ops_time_s(ops: list[Op], phase: str | None = None, kind: str | None = None) -> float:
    """The summed time of ``ops`` (optionally of one phase and/or kind)."""
    return sum(o.time_s for o in ops if (phase is None or o.phase == phase) and (kind is None or o.kind == kind))
