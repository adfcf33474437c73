"""The model description: a dense decoder-only transformer.

:class:`TransformerConfig` holds the architecture (layers, widths, heads,
vocabulary), the training shape (sequence length, micro-batch size) and the
numeric precision. It is validated when built: an invalid value raises
:class:`~piper.frontend.errors.ModelConfigError` naming the field.

Two families are covered, told apart by a few switches:

* GPT / Megatron-LM (Narayanan et al., SC'21): LayerNorm, biases on every
  linear layer, learned position embeddings, a GELU MLP with two matrices
  (FFN = 4h), tied input and output embeddings.
* Llama 2 / Llama 3: RMSNorm, no biases, rotary position embeddings (no
  position parameters), a SwiGLU MLP with three matrices, grouped-query
  attention (fewer key/value heads than query heads), untied embeddings.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields, replace
from typing import Any

from piper.core.errors import ModelConfigError
from piper.frontend.moe import MLAConfig, MoEConfig, is_moe_layer

__all__ = ["FFN_KINDS", "NORM_KINDS", "PRECISIONS", "TransformerConfig"]

#: MLP kinds: "gelu" = two matrices h->f->h with GELU; "swiglu" = three
#: matrices (gate and up h->f, down f->h), Shazeer 2020 "GLU Variants Improve Transformer"
FFN_KINDS = ("gelu", "swiglu")
#: normalisation layers: LayerNorm has a weight and a bias (2h parameters),
#: RMSNorm a weight only (h parameters)
NORM_KINDS = ("layernorm", "rmsnorm")
#: numeric precision of the matrix products: "bf16" (mixed precision, BF16/FP16 everywhere) or
#: "fp8" (Transformer Engine style: FP8 matrix products of the layers, BF16 elsewhere)
PRECISIONS = ("bf16", "fp8")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class TransformerConfig:
    """A dense decoder-only transformer and its training shape.

    Sizes are counts (not bytes) unless the name says otherwise.
    """

    #: a label for reports (preset name or config file name)
    name: str
    #: l, number of transformer layers
    layers: int
    #: h, hidden size (model width)
    hidden_size: int
    #: a, number of query attention heads
    attention_heads: int
    #: number of key/value heads (grouped-query attention; = a for multi-head attention)
    kv_heads: int
    #: f, the MLP's inner width
    ffn_hidden_size: int
    #: V, vocabulary size
    vocab_size: int
    #: s, sequence length of one training sample, tokens
    seq_length: int
    #: "gelu" (2 matrices) or "swiglu" (3 matrices)
    ffn_kind: str = "gelu"
    #: "layernorm" or "rmsnorm"
    norm: str = "layernorm"
    #: biases on the linear layers (GPT: yes, Llama: no)
    linear_bias: bool = True
    #: learned absolute position embeddings of s x h parameters (GPT); False for rotary (Llama)
    learned_positions: bool = True
    #: the output head shares the input embedding's weights
    tied_embeddings: bool = True
    #: b, sequences in one micro-batch
    micro_batch: int = 1
    #: bytes per weight and per activation element (2 for bf16 / fp16)
    precision_bytes: int = 2
    #: dropout layers (GPT: after attention, softmax and MLP; Llama: none): their masks are
    #: stored and their kernels run
    dropout: bool = True
    #: "bf16" or "fp8" (:data:`PRECISIONS`)
    precision: str = "bf16"
    #: the width of one attention head when it is not h / a (Qwen3, GPT-OSS: 128 and 64); None: h / a
    attention_head_dim: int | None = None
    #: the mixture-of-experts part (:class:`~piper.frontend.moe.MoEConfig`); None: a dense model
    moe: MoEConfig | None = None
    #: multi-head latent attention (:class:`~piper.frontend.moe.MLAConfig`, DeepSeek-V2/V3); None: MHA/GQA
    mla: MLAConfig | None = None
    #: w, tokens of the sliding attention window (each query attends to the w latest keys, itself
    #: included; HF ``sliding_window``) of the layers in ``sliding_window_layers``; None: no window
    sliding_window: int | None = None
    #: 0-based indices of the layers that attend within the window (HF ``layer_types`` "sliding_attention"),
    #: increasing; the others attend to the whole causal prefix
    sliding_window_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ModelConfigError(f"name: must be a non-empty string, got {self.name!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                if not _is_int(value):
                    raise ModelConfigError(f"{self.name}: {f.name} must be a whole number, got {value!r}")
                if value < 1:
                    raise ModelConfigError(f"{self.name}: {f.name} must be >= 1, got {value}")
            elif f.type in ("bool", bool) and not isinstance(value, bool):
                raise ModelConfigError(f"{self.name}: {f.name} must be true or false, got {value!r}")
        if self.ffn_kind not in FFN_KINDS:
            raise ModelConfigError(f"{self.name}: ffn_kind must be one of {', '.join(FFN_KINDS)}, got {self.ffn_kind!r}")
        if self.norm not in NORM_KINDS:
            raise ModelConfigError(f"{self.name}: norm must be one of {', '.join(NORM_KINDS)}, got {self.norm!r}")
        if self.precision not in PRECISIONS:
            raise ModelConfigError(f"{self.name}: precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.attention_head_dim is not None and (not _is_int(self.attention_head_dim) or self.attention_head_dim < 1):
            raise ModelConfigError(f"{self.name}: attention_head_dim must be a whole number >= 1 or null, "
                                   f"got {self.attention_head_dim!r}")
        self._check_window()
        if self.moe is not None and not isinstance(self.moe, MoEConfig):
            raise ModelConfigError(f"{self.name}: moe must be an MoEConfig or null, got {self.moe!r}")
        if self.moe is not None and not any(is_moe_layer(self.moe, i) for i in range(self.layers)):
            raise ModelConfigError(f"{self.name}: moe makes none of its {self.layers} layers an MoE layer (first_dense_layers "
                                   f"{self.moe.first_dense_layers}, layer_freq {self.moe.layer_freq}, layer_offset "
                                   f"{self.moe.layer_offset}; a Hugging Face config's first_k_dense_replace, "
                                   "moe_layer_freq or decoder_sparse_step)")
        if self.mla is not None and not isinstance(self.mla, MLAConfig):
            raise ModelConfigError(f"{self.name}: mla must be an MLAConfig or null, got {self.mla!r}")
        if self.attention_head_dim is None and self.mla is None and self.hidden_size % self.attention_heads:
            raise ModelConfigError(
                f"{self.name}: attention_heads ({self.attention_heads}) must divide hidden_size ({self.hidden_size})"
            )
        if self.attention_heads % self.kv_heads:
            raise ModelConfigError(
                f"{self.name}: kv_heads ({self.kv_heads}) must divide attention_heads ({self.attention_heads})"
            )

    def _check_window(self) -> None:
        w, where = self.sliding_window, self.sliding_window_layers
        if w is not None and (not _is_int(w) or w < 1):
            raise ModelConfigError(f"{self.name}: sliding_window must be a whole number >= 1 or null, got {w!r}")
        if not isinstance(where, (tuple, list)) or not all(_is_int(i) for i in where):
            raise ModelConfigError(f"{self.name}: sliding_window_layers must be a list of layer indices, got {where!r:.80}")
        object.__setattr__(self, "sliding_window_layers", tuple(where))
        if where and w is None:
            raise ModelConfigError(f"{self.name}: sliding_window_layers needs sliding_window (the window in tokens)")
        if w is not None and not where:
            raise ModelConfigError(f"{self.name}: sliding_window = {w} needs sliding_window_layers (the windowed layers)")
        if any(not 0 <= i < self.layers for i in where) or any(a >= b for a, b in itertools.pairwise(where)):
            raise ModelConfigError(f"{self.name}: sliding_window_layers must be increasing indices in [0, "
                                   f"{self.layers}), got {list(where)!r:.80}")
        if where and self.mla is not None:
            raise ModelConfigError(f"{self.name}: sliding_window with MLA is not modelled")

    def attention_window(self, layer: int) -> int | None:
        """The sliding window (tokens) of the 0-based transformer ``layer``; None: full causal attention."""
        return self.sliding_window if layer in self.sliding_window_layers else None

    # ---- derived sizes ------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """The width of one attention head: ``attention_head_dim``, or h / a."""
        return self.attention_head_dim or self.hidden_size // self.attention_heads

    @property
    def q_dim(self) -> int:
        """a * head_dim, the width of the query projection (= h unless ``attention_head_dim`` is set)."""
        return self.attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def split_kv_heads(self) -> int:
        """The key/value heads a tensor- or context-parallel split divides: ``kv_heads``, or with MLA
        every attention head (each has its own decompressed key and value)."""
        return self.attention_heads if self.mla is not None else self.kv_heads

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices of the MLP: 2 (GELU) or 3 (SwiGLU)."""
        return 3 if self.ffn_kind == "swiglu" else 2

    def with_changes(self, **changes: Any) -> TransformerConfig:
        """A copy with some fields replaced (validated again)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ModelConfigError(f"unknown model field(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("moe", "mla"):
            if out[key] is not None:
                out[key] = out[key].to_dict()
        return out
