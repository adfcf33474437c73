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

from dataclasses import dataclass

from piper.core.errors import ModelConfigError
from piper.frontend.config import TransformerConfig

__all__ = [
    "OPTIMIZER_STATE_BYTES",
    "RECOMPUTE_KINDS",
    "LayerParams",
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
    "model_flops_per_iteration",
    "model_params",
    "sc21_flops_per_iteration",
    "sc21_params",
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
    h, f, kv = cfg.hidden_size, cfg.ffn_hidden_size, cfg.kv_dim
    attention = h * (h + 2 * kv) + h * h
    mlp = cfg.ffn_matrices * h * f
    if cfg.linear_bias:
        split_bias = (h + 2 * kv) + (cfg.ffn_matrices - 1) * f
        row_bias = 2 * h
    else:
        split_bias = row_bias = 0
    return LayerParams(attention, mlp, split_bias, 2 * _norm_params(cfg) + row_bias)


def embedding_params(cfg: TransformerConfig) -> int:
    """Vh word embeddings (+ sh learned positions): [SC21]'s (V + s)h term."""
    return cfg.vocab_size * cfg.hidden_size + (cfg.seq_length * cfg.hidden_size if cfg.learned_positions else 0)


def final_norm_params(cfg: TransformerConfig) -> int:
    """The norm before the output head: 2h (LayerNorm) or h (RMSNorm)."""
    return _norm_params(cfg)


def head_params(cfg: TransformerConfig) -> int:
    """The output projection's own parameters: Vh, or 0 when tied to the embedding."""
    return 0 if cfg.tied_embeddings else cfg.vocab_size * cfg.hidden_size


def model_params(cfg: TransformerConfig) -> int:
    """The model's parameter count (tied weights counted once)."""
    return cfg.layers * layer_params(cfg).total + embedding_params(cfg) + final_norm_params(cfg) + head_params(cfg)


def sc21_params(cfg: TransformerConfig) -> float:
    """[SC21] Section 5.1 / Table 1: P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh))."""
    l, h, v, s = cfg.layers, cfg.hidden_size, cfg.vocab_size, cfg.seq_length
    return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))


# ---------------------------------------------------------------------------------
# FLOPs (per sequence; a matrix multiply of m x k by k x n is 2mkn FLOPs)
# ---------------------------------------------------------------------------------


def attention_core_forward_flops(cfg: TransformerConfig) -> float:
    """QK^T (2s^2h) and attention over V (2s^2h) per sequence and layer: 4s^2h ([SC21] Appendix).
    Causal masking is not discounted (as in the paper); the same for GQA, as every query head attends."""
    return 4 * cfg.seq_length**2 * cfg.hidden_size


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


def layer_train_flops(cfg: TransformerConfig, recompute: str = "none") -> float:
    """Forward + backward (+ recomputation) FLOPs of one layer per sequence.

    Backward = 2 x forward ([SC21] Appendix); full recomputation adds one more
    forward ([SC21]: 4 x forward in equation (3)); selective adds the core
    attention's forward ([K22] Section 5).
    """
    _check_recompute(recompute)
    fwd = layer_forward_flops(cfg)
    extra = {"none": 0.0, "selective": attention_core_forward_flops(cfg), "full": fwd}[recompute]
    return 3 * fwd + extra


def model_flops_per_iteration(cfg: TransformerConfig, global_batch: int) -> float:
    """Model FLOPs of one iteration (forward + backward, no recomputation) over ``global_batch`` sequences."""
    return global_batch * (cfg.layers * layer_train_flops(cfg, "none") + 3 * head_forward_flops(cfg))


def hardware_flops_per_iteration(cfg: TransformerConfig, global_batch: int, recompute: str = "full") -> float:
    """FLOPs the hardware runs in one iteration with ``recompute`` on every layer
    (the output layer is never recomputed, as in [SC21] equation (3))."""
    return global_batch * (cfg.layers * layer_train_flops(cfg, recompute) + 3 * head_forward_flops(cfg))


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
      score tensor is kept, only the fp32 log-sum-exp per query and head: 4a/h (the output
      is the projection's input, counted above).
    """
    p, h = cfg.precision_bytes, cfg.hidden_size
    q = 1.0 if cfg.precision == "fp8" else float(p)
    r = cfg.kv_heads / cfg.attention_heads
    drop = 1.0 if cfg.dropout else 0.0
    replicated = 2 * p + 2 * q + 2 * drop
    ratio = cfg.ffn_hidden_size / h
    mlp = (2 * p + q if cfg.ffn_kind == "swiglu" else p + q) * ratio
    split = p * (1 + 2 * r) + q + mlp
    if flash_attention:
        core = 4.0 * cfg.attention_heads / h
    else:
        core = (2 * p + 1 if cfg.dropout else p) * cfg.attention_heads * cfg.seq_length / h
    return replicated, split, core


def layer_activation_bytes(cfg: TransformerConfig, t: int, recompute: str, sequence_parallel: bool,
                           flash_attention: bool = False) -> float:
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
    recomputation keeps flash attention's log-sum-exp (it recomputes the kernel anyway).
    Full recomputation's transient (one layer's activations rebuilt during its backward
    pass) is not counted.
    """
    _check_recompute(recompute)
    sbh = cfg.seq_length * cfg.micro_batch * cfg.hidden_size
    if recompute == "full":
        return cfg.precision_bytes * sbh / (t if sequence_parallel else 1)
    replicated, split, core = _layer_activation_terms(cfg, flash_attention)
    keep_core = core if recompute == "none" else 0.0
    if sequence_parallel:
        return sbh * (replicated + split + keep_core) / t
    return sbh * (replicated + (split + keep_core) / t)


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
