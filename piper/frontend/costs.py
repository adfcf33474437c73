"""The analytic cost model: parameters, FLOPs, activation and state memory,
tensor-parallel communication. Pure functions of a :class:`TransformerConfig`.

Notation (as in the papers): l layers, h hidden size, a attention heads,
s sequence length, b micro-batch size, V vocabulary, f FFN width,
t tensor-parallel degree, p bytes per element (2 for bf16),
r = kv_heads / a (1 without grouped-query attention).

References:

* [SC21] Narayanan et al., "Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM", SC'21. Section 3.2 (tensor model
  parallelism: two all-reduces in the forward and two in the backward pass
  of every layer), Section 5.1 and Appendix (FLOPs: 24Bsh^2 + 4Bs^2h per
  layer forward, logit layer 2BshV; equation (3) for a whole iteration with
  recomputation), Table 1 (parameter counts from 12lh^2(1 + 13/(12h) + (V+s)/(12lh))).
* [K22] Korthikanti et al., "Reducing Activation Recomputation in Large
  Transformer Models", 2022 (MLSys 2023). Section 4.1 (per-layer activations
  sbh(34 + 5as/h) bytes: attention 11sbh + 5as^2b, MLP 19sbh, LayerNorms
  4sbh), Table 2 (with tensor / sequence parallelism and selective or full
  recomputation), Section 4.3 (embedding and output layer), Section 5
  (selective recomputation recomputes only the core attention: QK^T,
  softmax, softmax dropout, attention over V).
* [ZeRO] Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
  Trillion Parameter Models", SC'20, Section 3.1: mixed-precision Adam keeps
  2 + 2 + K bytes per parameter (fp16 weights, fp16 gradients, K = 12 bytes
  of fp32 master weights, momentum and variance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piper.core.errors import ModelConfigError
from piper.frontend import moe
from piper.frontend.config import TransformerConfig
from piper.frontend.recompute import DEFAULT_RECOMPUTE_MODULES, recomputed_parts

__all__ = [
    "OPTIMIZER_STATE_BYTES",
    "RECOMPUTE_KINDS",
    "LayerParams",
    "active_params",
    "allreduce_bytes_per_device",
    "attention_core_forward_flops",
    "embedding_activation_bytes",
    "embedding_params",
    "final_norm_activation_bytes",
    "final_norm_params",
    "hardware_flops_per_iteration",
    "head_activation_bytes",
    "head_forward_flops",
    "head_params",
    "layer_activation_bytes",
    "layer_forward_flops",
    "layer_params",
    "layer_tp_collectives",
    "layer_train_flops",
    "layer_train_flops_at",
    "model_flops_per_iteration",
    "model_params",
    "moe_layer_forward_flops",
    "moe_layer_params",
    "recomputed_forward_flops",
    "sc21_flops_per_iteration",
    "sc21_params",
    "stack_train_flops",
]

#: activation recomputation kinds: none, selective ([K22] Section 5), full (every layer keeps only its input)
RECOMPUTE_KINDS = ("none", "selective", "full")
#: K of [ZeRO] Section 3.1: fp32 master weights (4) + Adam momentum (4) + variance (4), bytes per parameter
OPTIMIZER_STATE_BYTES = 12


# ---------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer layer, by role (counts, not bytes).

    ``*_split`` are divided among the t tensor-parallel devices (Megatron's
    column- and row-parallel weights, column-parallel biases); ``replicated``
    are held whole on each (norm weights, biases of the row-parallel layers).
    """

    #: q, k, v and output projections: h(h + 2 kv_dim) + h^2 weights
    attention_matmul: int
    #: 2hf (GELU) or 3hf (SwiGLU) weights
    mlp_matmul: int
    #: biases of the column-parallel layers: (h + 2 kv_dim) + f (GELU) or 2f (SwiGLU)
    split_bias: int
    #: norm weights (2 x 2h LayerNorm, 2 x h RMSNorm) + row-parallel biases (2h)
    replicated: int

    @property
    def matmul(self) -> int:
        return self.attention_matmul + self.mlp_matmul

    @property
    def total(self) -> int:
        return self.matmul + self.split_bias + self.replicated

    def per_device(self, t: int) -> float:
        """Parameters held by each of t tensor-parallel devices."""
        return (self.matmul + self.split_bias) / t + self.replicated


def _norm_params(cfg: TransformerConfig) -> int:
    return 2 * cfg.hidden_size if cfg.norm == "layernorm" else cfg.hidden_size


def layer_params(cfg: TransformerConfig) -> LayerParams:
    """Parameters of one layer. For GPT (r = 1, f = 4h, biases, LayerNorm) this is
    12h^2 + 13h, the per-layer term of [SC21]'s 12lh^2(1 + 13/(12h) + ...)."""
    h, f, kv, q = cfg.hidden_size, cfg.ffn_hidden_size, cfg.kv_dim, cfg.q_dim
    attention = h * (q + 2 * kv) + q * h
    latent_norms = 0
    if cfg.mla is not None:  # multi-head latent attention (piper/frontend/moe.py)
        attention, latent_norms = moe.mla_attention_params(cfg.mla, h, cfg.attention_heads)
    mlp = cfg.ffn_matrices * h * f
    if cfg.linear_bias:
        split_bias = (q + 2 * kv) + (cfg.ffn_matrices - 1) * f
        row_bias = 2 * h
    else:
        split_bias = row_bias = 0
    return LayerParams(attention, mlp, split_bias, 2 * _norm_params(cfg) + row_bias + latent_norms)


def embedding_params(cfg: TransformerConfig) -> int:
    """Vh word embeddings (+ sh learned positions): [SC21]'s (V + s)h term."""
    return cfg.vocab_size * cfg.hidden_size + (cfg.seq_length * cfg.hidden_size if cfg.learned_positions else 0)


def final_norm_params(cfg: TransformerConfig) -> int:
    """The norm before the output head: 2h (LayerNorm) or h (RMSNorm)."""
    return _norm_params(cfg)


def head_params(cfg: TransformerConfig) -> int:
    """The output projection's own parameters: Vh, or 0 when tied to the embedding."""
    return 0 if cfg.tied_embeddings else cfg.vocab_size * cfg.hidden_size


def moe_layer_params(cfg: TransformerConfig) -> tuple[LayerParams, int]:
    """(the non-expert parameters, the routed experts' parameters) of one MoE layer of ``cfg``:
    attention and norms as :func:`layer_params`, the MLP replaced by the shared experts (split
    by t like the dense MLP) and the router (held whole on each device, with the norms); the
    E routed experts' parameters apart (``expertParameterSize``, docs/problem.md §11)."""
    if cfg.moe is None:
        raise ModelConfigError(f"{cfg.name}: not a mixture-of-experts model")
    dense = layer_params(cfg)
    m, h, mats = cfg.moe, cfg.hidden_size, cfg.ffn_matrices
    shared = moe.shared_expert_params(m, h, mats)
    assert shared == 0 or shared == mats * h * m.shared_ffn_hidden_size + (
        (mats - 1) * m.shared_ffn_hidden_size + h if m.expert_bias else 0)
    shared_mat = mats * h * m.shared_ffn_hidden_size
    dense_mlp_bias = (mats - 1) * cfg.ffn_hidden_size if cfg.linear_bias else 0
    row_bias_mlp = h if cfg.linear_bias else 0
    shared_split_bias = (mats - 1) * m.shared_ffn_hidden_size if shared and m.expert_bias else 0
    shared_row_bias = h if shared and m.expert_bias else 0
    part = LayerParams(
        attention_matmul=dense.attention_matmul,
        mlp_matmul=shared_mat,
        split_bias=dense.split_bias - dense_mlp_bias + shared_split_bias,
        replicated=dense.replicated - row_bias_mlp + moe.router_params(m, h) + shared_row_bias,
    )
    return part, m.experts * moe.expert_params(m, h, mats)


def model_params(cfg: TransformerConfig) -> int:
    """The model's parameter count (tied weights counted once; every expert counted)."""
    n_moe = moe.moe_layer_count(cfg.moe, cfg.layers)
    layers = (cfg.layers - n_moe) * layer_params(cfg).total
    if n_moe:
        part, experts = moe_layer_params(cfg)
        layers += n_moe * (part.total + experts)
    return layers + embedding_params(cfg) + final_norm_params(cfg) + head_params(cfg)


def active_params(cfg: TransformerConfig, input_embedding: bool = True) -> int:
    """The parameters one token's forward pass uses: every non-expert parameter and k of the E
    routed experts of each MoE layer (= :func:`model_params` for a dense model). Without
    ``input_embedding`` the embedding table (a lookup, no FLOPs) is left out, the count of
    OpenAI's gpt-oss model card (5.1B of 117B); Mistral, DeepSeek and Qwen count it."""
    total = model_params(cfg)
    if cfg.moe is not None:
        n_moe = moe.moe_layer_count(cfg.moe, cfg.layers)
        per_expert = moe.expert_params(cfg.moe, cfg.hidden_size, cfg.ffn_matrices)
        total -= n_moe * (cfg.moe.experts - cfg.moe.top_k) * per_expert
    if not input_embedding:
        total -= cfg.vocab_size * cfg.hidden_size if not cfg.tied_embeddings else 0
    return total


def sc21_params(cfg: TransformerConfig) -> float:
    """[SC21] Section 5.1 / Table 1: P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh))."""
    l, h, v, s = cfg.layers, cfg.hidden_size, cfg.vocab_size, cfg.seq_length
    return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))


# ---------------------------------------------------------------------------------
# FLOPs (per sequence; a matrix multiply of m x k by k x n is 2mkn FLOPs)
# ---------------------------------------------------------------------------------


def attention_core_forward_flops(cfg: TransformerConfig) -> float:
    """QK^T (2s^2h) and attention over V (2s^2h) per sequence and layer: 4s^2h ([SC21] Appendix).
    Causal masking is not discounted (as in the paper); the same for GQA, as every query head attends.
    With a head width other than h/a: 2 s^2 a (d_qk + d_v) (MLA: d_qk = d_nope + d_rope)."""
    if cfg.mla is not None:
        return 2 * cfg.seq_length**2 * cfg.attention_heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim)
    return 4 * cfg.seq_length**2 * cfg.q_dim


def layer_forward_flops(cfg: TransformerConfig) -> float:
    """Forward FLOPs of one layer per sequence: 2 s (matmul weights) + 4 s^2 h.

    For GPT (12h^2 matmul weights) this is [SC21]'s 24sh^2 + 4s^2h; biases,
    norms, softmax and activations (elementwise) are not counted, as in the paper.
    """
    return 2 * cfg.seq_length * layer_params(cfg).matmul + attention_core_forward_flops(cfg)


def head_forward_flops(cfg: TransformerConfig) -> float:
    """The logit layer's forward FLOPs per sequence: 2shV ([SC21] Appendix). The embedding lookup is free."""
    return 2 * cfg.seq_length * cfg.hidden_size * cfg.vocab_size


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE_KINDS:
        raise ModelConfigError(f"recompute must be one of {', '.join(RECOMPUTE_KINDS)}, got {recompute!r}")


def recomputed_forward_flops(cfg: TransformerConfig, moe_layer: bool,
                             modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> float:
    """The forward FLOPs per sequence that selective recomputation of ``modules`` runs again in one
    layer (an MoE layer when ``moe_layer``; piper/frontend/recompute.py): the core attention
    (``core_attn``, [K22] Section 5), the dense MLP's products (``mlp``), the MoE block's (``moe``:
    router, k routed experts, shared experts) or the shared experts' (``shared_experts``), MLA's up
    projections (``mla_up_proj``); ``layernorm`` and ``moe_act`` recompute element-wise work only."""
    parts = recomputed_parts("selective", modules, moe_layer=moe_layer, mla=cfg.mla is not None,
                             shared_experts=bool(cfg.moe is not None and cfg.moe.shared_ffn_hidden_size))
    s, h = cfg.seq_length, cfg.hidden_size
    flops = attention_core_forward_flops(cfg) if parts.core_attention else 0.0
    if parts.dense_mlp:
        flops += 2 * s * layer_params(cfg).mlp_matmul
    if cfg.moe is not None and moe_layer:
        shared = 2 * s * cfg.ffn_matrices * h * cfg.moe.shared_ffn_hidden_size
        if parts.moe_block:
            experts = 2 * s * cfg.moe.top_k * cfg.ffn_matrices * h * cfg.moe.expert_ffn_hidden_size
            flops += experts + shared + s * moe.router_forward_flops(cfg.moe, h)
        if parts.shared_experts:  # inside a recomputed block, once more (Megatron-Core nests the checkpoints)
            flops += shared
    if parts.mla_up_projection and cfg.mla is not None:
        mla, a = cfg.mla, cfg.attention_heads
        # the queries' up projection (or, without a query bottleneck, their one projection from h)
        flops += 2 * s * ((mla.q_lora_rank or h) * a * mla.qk_head_dim
                          + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim))
    return flops


def layer_train_flops(cfg: TransformerConfig, recompute: str = "none",
                      modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> float:
    """Forward + backward (+ recomputation) FLOPs of one layer per sequence.

    Backward = 2 x forward ([SC21] Appendix); full recomputation adds one more
    forward ([SC21]: 4 x forward in equation (3)); selective adds the forward of what
    ``modules`` recompute (:func:`recomputed_forward_flops`; by default the core
    attention, [K22] Section 5).
    """
    _check_recompute(recompute)
    fwd = layer_forward_flops(cfg)
    extra = {"none": 0.0, "selective": None, "full": fwd}[recompute]
    if extra is None:
        extra = recomputed_forward_flops(cfg, False, modules)
    return 3 * fwd + extra


def moe_layer_forward_flops(cfg: TransformerConfig) -> float:
    """Forward FLOPs of one MoE layer per sequence, counted with the ACTIVE parameters: 2 s (the
    non-expert product weights + the router's h E + k routed experts' product weights) + the
    core attention."""
    if cfg.moe is None:
        raise ModelConfigError(f"{cfg.name}: not a mixture-of-experts model")
    part, _ = moe_layer_params(cfg)
    m = cfg.moe
    expert_matmul = cfg.ffn_matrices * cfg.hidden_size * m.expert_ffn_hidden_size
    return (2 * cfg.seq_length * (part.matmul + m.top_k * expert_matmul)
            + cfg.seq_length * moe.router_forward_flops(m, cfg.hidden_size) + attention_core_forward_flops(cfg))


def layer_train_flops_at(cfg: TransformerConfig, index: int, recompute: str = "none",
                         modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> float:
    """:func:`layer_train_flops` of the 0-based layer ``index`` (an MoE layer with its active
    parameters, :func:`moe_layer_forward_flops`)."""
    if not moe.is_moe_layer(cfg.moe, index):
        return layer_train_flops(cfg, recompute, modules)
    return _moe_layer_train_flops(cfg, recompute, modules)


def _moe_layer_train_flops(cfg: TransformerConfig, recompute: str, modules: Sequence[str]) -> float:
    _check_recompute(recompute)
    fwd = moe_layer_forward_flops(cfg)
    extra = {"none": 0.0, "selective": None, "full": fwd}[recompute]
    if extra is None:
        extra = recomputed_forward_flops(cfg, True, modules)
    return 3 * fwd + extra


def stack_train_flops(cfg: TransformerConfig, recompute: str = "none",
                      modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> float:
    """Forward + backward (+ recomputation) FLOPs of all l layers per sequence (MoE layers with
    their active parameters, :func:`moe_layer_forward_flops`)."""
    n_moe = moe.moe_layer_count(cfg.moe, cfg.layers)
    total = (cfg.layers - n_moe) * layer_train_flops(cfg, recompute, modules)
    if n_moe:
        total += n_moe * _moe_layer_train_flops(cfg, recompute, modules)
    return total


def model_flops_per_iteration(cfg: TransformerConfig, global_batch: int) -> float:
    """Model FLOPs of one iteration (forward + backward, no recomputation) over ``global_batch`` sequences."""
    return global_batch * (stack_train_flops(cfg, "none") + 3 * head_forward_flops(cfg))


def hardware_flops_per_iteration(cfg: TransformerConfig, global_batch: int, recompute: str = "full",
                                 modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> float:
    """FLOPs the hardware runs in one iteration with ``recompute`` on every layer (``modules``: what
    selective recomputes; the output layer is never recomputed, as in [SC21] equation (3))."""
    return global_batch * (stack_train_flops(cfg, recompute, modules) + 3 * head_forward_flops(cfg))


def sc21_flops_per_iteration(cfg: TransformerConfig, global_batch: int) -> float:
    """[SC21] equation (3): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (full recomputation)."""
    b, s, l, h, v = global_batch, cfg.seq_length, cfg.layers, cfg.hidden_size, cfg.vocab_size
    return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


# ---------------------------------------------------------------------------------
# activation memory, bytes per micro-batch in flight, on each of t devices
# ---------------------------------------------------------------------------------


def _layer_activation_terms(cfg: TransformerConfig, flash_attention: bool = False) -> tuple[float, float, float]:
    """([K22] Section 4.1, in units of s*b*h bytes) the replicated part, the
    tensor-parallel part, and the core-attention part of one layer's activations.

    [K22] with p = 2, r = 1, f = 4h and dropout: 10, 24 and 5as/h. Generalised, tensor by tensor:

    * replicated: the two norms' inputs 2p, the inputs of QKV and FC1 2q (q = p, or 1 byte
      under FP8: Transformer Engine keeps the FP8 copy of a product's input for its weight
      gradient), and with dropout the two 1-byte dropout masks: 2p + 2q + 2 (= 10);
    * split by t: Q p, K and V p*r each, the output projection's input q, and the MLP's inner
      tensors: GELU's input p f/h and output (FC2's input) q f/h; SwiGLU's gate and up outputs
      2p f/h and their product q f/h. Total p(1 + 2r) + q + (p + q or 2p + q) f/h (= 24);
    * core attention, split by t (as/h per s*b*h): the softmax output p, and with dropout its
      1-byte mask and the dropout output p: (2p + 1) as/h (= 5as/h), p as/h without dropout.
      The same for GQA (every query head has its own scores). With fused (flash) attention no
      score tensor is kept, only the fp32 log-sum-exp per query and head: 4a/h, and the kernel's
      output, which its backward pass reads (FlashAttention-2, Algorithm 2): in BF16 the
      projection's input, counted above; under FP8 the projection keeps its own FP8 copy, so the
      kernel's BF16 output adds p q_dim/h.
    """
    p, h = cfg.precision_bytes, cfg.hidden_size
    q = 1.0 if cfg.precision == "fp8" else float(p)
    r = cfg.kv_heads / cfg.attention_heads
    drop = 1.0 if cfg.dropout else 0.0
    replicated = 2 * p + 2 * q + 2 * drop
    ratio = cfg.ffn_hidden_size / h
    mlp = (2 * p + q if cfg.ffn_kind == "swiglu" else p + q) * ratio
    qw = cfg.q_dim / h  # query (and output-projection input) width in units of h
    split = p * (qw + 2 * r * qw) + q * qw + mlp
    if flash_attention:
        core = 4.0 * cfg.attention_heads / h + (p * qw if cfg.precision == "fp8" else 0.0)
    else:
        core = (2 * p + 1 if cfg.dropout else p) * cfg.attention_heads * cfg.seq_length / h
    return replicated, split, core


def layer_activation_bytes(cfg: TransformerConfig, t: int, recompute: str, sequence_parallel: bool,
                           flash_attention: bool = False,
                           modules: Sequence[str] = DEFAULT_RECOMPUTE_MODULES) -> float:
    """Activation bytes one layer keeps per micro-batch in flight, on each of t devices.

    [K22] Table 2 (with p = 2, r = 1, f = 4h, dropout, no flash attention):

    ===============  ================================  ======================
    recompute        no sequence parallelism           sequence parallelism
    ===============  ================================  ======================
    none             sbh(10 + 24/t + 5as/(ht))         sbh(34/t + 5as/(ht))
    selective        sbh(10 + 24/t)                    sbh(34/t)
    full             2sbh (p sbh: the layer input)     2sbh/t
    ===============  ================================  ======================

    adjusted to the model by :func:`_layer_activation_terms` (no masks without dropout, flash
    attention's log-sum-exp instead of the scores, FP8 inputs of the products). Selective
    recomputation frees what ``modules`` recompute (piper/frontend/recompute.py; this dense
    layer: the core-attention tensors with ``core_attn``, FC1's input q sbh and the MLP's inner
    tensors with ``mlp``). Full recomputation's transient (one layer's activations rebuilt during
    its backward pass) is not counted.
    """
    _check_recompute(recompute)
    sbh = cfg.seq_length * cfg.micro_batch * cfg.hidden_size
    if recompute == "full":
        return cfg.precision_bytes * sbh / (t if sequence_parallel else 1)
    replicated, split, core = _layer_activation_terms(cfg, flash_attention)
    parts = recomputed_parts(recompute, modules, moe_layer=False, mla=False)
    keep_core = 0.0 if parts.core_attention else core
    if parts.dense_mlp:
        fc1_input, mlp_inner = _mlp_activation_terms(cfg)
        replicated -= fc1_input
        split -= mlp_inner
    if sequence_parallel:
        return sbh * (replicated + split + keep_core) / t
    return sbh * (replicated + (split + keep_core) / t)


def _mlp_activation_terms(cfg: TransformerConfig) -> tuple[float, float]:
    """(FC1's input, in the replicated part; the MLP's inner tensors, in the tensor-parallel part) of
    :func:`_layer_activation_terms`, in units of s*b*h bytes: what ``mlp`` recomputation frees."""
    p, h = cfg.precision_bytes, cfg.hidden_size
    q = 1.0 if cfg.precision == "fp8" else float(p)
    return q, (2 * p + q if cfg.ffn_kind == "swiglu" else p + q) * cfg.ffn_hidden_size / h


def embedding_activation_bytes(cfg: TransformerConfig, t: int, sequence_parallel: bool) -> float:
    """The embedding's output dropout mask, 1 byte per element: sbh ([K22] Section 4.3; /t with
    sequence parallelism); 0 for a model without dropout."""
    if not cfg.dropout:
        return 0.0
    sbh = cfg.seq_length * cfg.micro_batch * cfg.hidden_size
    return sbh / (t if sequence_parallel else 1)


def final_norm_activation_bytes(cfg: TransformerConfig, t: int, sequence_parallel: bool) -> float:
    """The final norm's input: p*sbh ([K22] Section 4.3 counts 4sbh for LayerNorm at p = 2 with its output; the
    output is stored by the head here); /t with sequence parallelism."""
    sbh = cfg.seq_length * cfg.micro_batch * cfg.hidden_size
    return cfg.precision_bytes * sbh / (t if sequence_parallel else 1)


def head_activation_bytes(cfg: TransformerConfig, t: int, sequence_parallel: bool) -> float:
    """The output projection's input p*sbh (/t with sequence parallelism) plus the fp32
    logits for the cross-entropy, 4sbV/t ([K22] Section 4.3)."""
    s, b = cfg.seq_length, cfg.micro_batch
    inputs = cfg.precision_bytes * s * b * cfg.hidden_size / (t if sequence_parallel else 1)
    return inputs + 4 * s * b * cfg.vocab_size / t


# ---------------------------------------------------------------------------------
# tensor-parallel communication
# ---------------------------------------------------------------------------------


def allreduce_bytes_per_device(message_bytes: float, t: int) -> float:
    """Bytes each device sends in a ring all-reduce of ``message_bytes`` among t
    devices: 2(t - 1)/t x message. A reduce-scatter plus an all-gather (sequence
    parallelism, [K22] Section 4.2.2) sends the same."""
    return 2 * (t - 1) / t * message_bytes if t > 1 else 0.0


def layer_tp_collectives(recompute: str) -> int:
    """All-reduces (or reduce-scatter + all-gather pairs) of the b x s x h layer
    activation per layer and micro-batch: 2 forward + 2 backward ([SC21] Section 3.2,
    Figure 5), plus the 2 forward ones again under full recomputation ([K22]
    Section 5); selective recomputation repeats none (core attention needs no communication)."""
    _check_recompute(recompute)
    return 6 if recompute == "full" else 4
