"""Mixture-of-experts layers and multi-head latent attention: the model description and its
parameter counts.

**Mixture of experts** (:class:`MoEConfig`; Shazeer et al. 2017, "Outrageously Large Neural
Networks"; Fedus et al. 2021, Switch Transformer; Jiang et al. 2024, Mixtral; DeepSeek-AI 2024,
DeepSeek-V3 Section 2.1.2). An MoE layer replaces the MLP of a transformer layer by

* a **router**: a linear map h -> E (E routed experts; no bias unless ``router_bias``), a
  softmax (Mixtral, Qwen3, GPT-OSS) or sigmoid (DeepSeek-V3) score and a top-k choice per
  token. Its FLOPs per token are 2 h E forward (the products; the score and top-k are
  element-wise, 2 x 4 bytes per logit in fp32 are priced as memory traffic);
* E **routed experts**, each an MLP of width F = ``expert_ffn_hidden_size`` (the model's
  ``ffn_kind``: 3 h F weights for SwiGLU, 2 h F for GELU; plus biases 2F + h or F + h with
  ``expert_bias``, GPT-OSS), each token going to k = ``top_k`` of them;
* optionally **shared experts** (DeepSeek-V3: 1 of width 2,048) that every token passes
  through: one MLP of width ``shared_ffn_hidden_size`` (their widths summed).

Which layers are MoE (0-based index i): i >= ``first_dense_layers`` (DeepSeek-V3's
``first_k_dense_replace`` = 3) and (i + ``layer_offset``) % ``layer_freq`` == 0 (DeepSeek's
``moe_layer_freq`` and Megatron-LM's ``--moe-layer-freq`` have offset 0; Qwen-MoE's
``decoder_sparse_step`` s makes layer i sparse when (i + 1) % s == 0: offset 1). Dense layers
keep the model's ``ffn_hidden_size``.

**Load balance and capacity.** The time model assumes balanced routing: every expert gets
k/E of the tokens (the load-balancing loss or bias keeps the load near that average; the
published Megatron-Bridge rows force-balance the load). ``capacity_factor`` c (Megatron-LM's
``--moe-expert-capacity-factor``; None = dropless, Megatron's default) bounds each expert's
tokens at c times the average: the front end then sizes the routed-token buffers and prices
the expert products at c x average (Megatron pads to the capacity with
``--moe-pad-expert-input-to-capacity``). **Documented default for memory:** dropless training
has no bound short of every token of the expert group landing on one device (e times the
average); planning for that would make every MoE plan absurd, so a dropless model's memory is
sized at the balanced average (c = 1) -- set ``capacity_factor`` (``--moe-capacity-factor``
where a command has it) to plan for a bound.

**Multi-head latent attention** (:class:`MLAConfig`; DeepSeek-AI, "DeepSeek-V2", 2024, Section
2.1.2-2.1.3, and DeepSeek-V3): queries through a low-rank bottleneck h -> q_lora (RMSNorm) ->
a (d_nope + d_rope); keys and values through h -> kv_lora + d_rope (RMSNorm on the kv_lora
part) -> a (d_nope + d_v), the d_rope part of the key shared by all heads; the output
projection a d_v -> h. Parameters: h q_lora + q_lora + q_lora a (d_nope + d_rope) +
h (kv_lora + d_rope) + kv_lora + kv_lora a (d_nope + d_v) + a d_v h. With ``q_lora_rank`` 0 the
queries are one h -> a (d_nope + d_rope) product. The KV cache (MLA's point) is irrelevant for
training.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from piper.core.errors import ModelConfigError

__all__ = [
    "ROUTER_SCORES",
    "MLAConfig",
    "MoEConfig",
    "expert_params",
    "is_moe_layer",
    "mla_attention_params",
    "moe_layer_count",
    "router_forward_flops",
    "router_params",
    "shared_expert_params",
]

#: the router's score function: softmax over the E logits (Mixtral, Qwen3, GPT-OSS) or a
#: sigmoid per expert (DeepSeek-V3, Section 2.1.2)
ROUTER_SCORES = ("softmax", "sigmoid")


def _whole(owner: str, name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelConfigError(f"{owner}: {name} must be a whole number, got {value!r}")
    if value < minimum:
        raise ModelConfigError(f"{owner}: {name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts part of a model (counts, not bytes). See the module docstring."""

    #: E, routed experts per MoE layer
    experts: int
    #: k, routed experts per token
    top_k: int
    #: F, the inner width of one routed expert
    expert_ffn_hidden_size: int
    #: the summed inner width of the shared experts (0: none)
    shared_ffn_hidden_size: int = 0
    #: number of shared experts (for reports; their width is ``shared_ffn_hidden_size``)
    shared_experts: int = 0
    #: the first layers that keep a dense MLP (DeepSeek-V3's ``first_k_dense_replace``)
    first_dense_layers: int = 0
    #: every layer_freq-th layer is MoE (see ``layer_offset``)
    layer_freq: int = 1
    #: layer i is MoE when (i + layer_offset) % layer_freq == 0 (0: DeepSeek / Megatron; 1: Qwen)
    layer_offset: int = 0
    #: "softmax" or "sigmoid" (:data:`ROUTER_SCORES`)
    router_score: str = "softmax"
    #: the router has a bias of E (GPT-OSS)
    router_bias: bool = False
    #: biases on the experts' linear layers (GPT-OSS)
    expert_bias: bool = False
    #: c: tokens per expert at most c x the balanced average (None: dropless, memory sized at c = 1)
    capacity_factor: float | None = None

    def __post_init__(self) -> None:
        owner = "moe"
        for name in ("experts", "top_k", "expert_ffn_hidden_size", "layer_freq"):
            _whole(owner, name, getattr(self, name), 1)
        for name in ("shared_ffn_hidden_size", "shared_experts", "first_dense_layers", "layer_offset"):
            _whole(owner, name, getattr(self, name), 0)
        if self.experts < 2:
            raise ModelConfigError(f"{owner}: experts must be >= 2 for a mixture of experts, got {self.experts}")
        if self.top_k > self.experts:
            raise ModelConfigError(f"{owner}: top_k ({self.top_k}) must be <= experts ({self.experts})")
        if (self.shared_experts == 0) != (self.shared_ffn_hidden_size == 0):
            raise ModelConfigError(f"{owner}: shared_experts ({self.shared_experts}) and shared_ffn_hidden_size "
                                   f"({self.shared_ffn_hidden_size}) must both be 0 or both be >= 1")
        if self.router_score not in ROUTER_SCORES:
            raise ModelConfigError(f"{owner}: router_score must be one of {', '.join(ROUTER_SCORES)}, "
                                   f"got {self.router_score!r}")
        for name in ("router_bias", "expert_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ModelConfigError(f"{owner}: {name} must be true or false, got {getattr(self, name)!r}")
        c = self.capacity_factor
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not 1.0 <= c <= 1e3):
            raise ModelConfigError(f"{owner}: capacity_factor must be a number in [1, 1000] or null (dropless), got {c!r}")

    @property
    def memory_capacity_factor(self) -> float:
        """The factor on the balanced token count that sizes the routed-token buffers and the
        expert products: ``capacity_factor``, or 1 for dropless (the documented default)."""
        return 1.0 if self.capacity_factor is None else float(self.capacity_factor)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class MLAConfig:
    """Multi-head latent attention's widths (DeepSeek-V2/V3; see the module docstring)."""

    #: the query bottleneck (0: queries by one h -> a (d_nope + d_rope) product)
    q_lora_rank: int
    #: the key/value bottleneck
    kv_lora_rank: int
    #: d_nope, the per-head query/key width without rotary embedding
    qk_nope_head_dim: int
    #: d_rope, the per-head query/key width with rotary embedding (the key's part shared by all heads)
    qk_rope_head_dim: int
    #: d_v, the per-head value width
    v_head_dim: int

    def __post_init__(self) -> None:
        _whole("mla", "q_lora_rank", self.q_lora_rank, 0)
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _whole("mla", name, getattr(self, name), 1)

    @property
    def qk_head_dim(self) -> int:
        """d_nope + d_rope, the width of a query (and key) head."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def is_moe_layer(moe: MoEConfig | None, index: int) -> bool:
    """Whether the 0-based layer ``index`` has an MoE block (see :class:`MoEConfig`)."""
    if moe is None:
        return False
    return index >= moe.first_dense_layers and (index + moe.layer_offset) % moe.layer_freq == 0


def moe_layer_count(moe: MoEConfig | None, layers: int) -> int:
    """How many of ``layers`` layers are MoE layers."""
    return sum(is_moe_layer(moe, i) for i in range(layers))


def _mlp_params(hidden: int, width: int, matrices: int, bias: bool) -> int:
    return matrices * hidden * width + ((matrices - 1) * width + hidden if bias else 0)


def expert_params(moe: MoEConfig, hidden: int, ffn_matrices: int) -> int:
    """Parameters of one routed expert: ``ffn_matrices`` h F (+ (matrices - 1) F + h biases)."""
    return _mlp_params(hidden, moe.expert_ffn_hidden_size, ffn_matrices, moe.expert_bias)


def shared_expert_params(moe: MoEConfig, hidden: int, ffn_matrices: int) -> int:
    """Parameters of the shared experts: ``ffn_matrices`` h F_shared (biases as the routed ones)."""
    if moe.shared_ffn_hidden_size == 0:
        return 0
    return _mlp_params(hidden, moe.shared_ffn_hidden_size, ffn_matrices, moe.expert_bias)


def router_params(moe: MoEConfig, hidden: int) -> int:
    """The router: h E weights (+ E bias)."""
    return hidden * moe.experts + (moe.experts if moe.router_bias else 0)


def router_forward_flops(moe: MoEConfig, hidden: int) -> float:
    """The router's forward FLOPs per token: 2 h E (the product; score and top-k are element-wise)."""
    return 2.0 * hidden * moe.experts


def mla_attention_params(mla: MLAConfig, hidden: int, heads: int) -> tuple[int, int]:
    """(matrix weights, norm weights) of one MLA block (module docstring's formula)."""
    a = heads
    if mla.q_lora_rank:
        q = hidden * mla.q_lora_rank + mla.q_lora_rank * a * mla.qk_head_dim
        q_norm = mla.q_lora_rank
    else:
        q, q_norm = hidden * a * mla.qk_head_dim, 0
    kv = hidden * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim)
    out = a * mla.v_head_dim * hidden
    return q + kv + out, q_norm + mla.kv_lora_rank
