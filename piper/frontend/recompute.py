"""What selective recomputation recomputes: Megatron-Core's ``--recompute-modules``.

A layer's TMPC ``selective`` (piper/frontend/tmpc.py) recomputes the modules the training setup
names (:attr:`piper.frontend.workload.TrainingSetup.recompute_modules`, ``--recompute-modules``;
Megatron-Core's ``TransformerConfig.recompute_modules``, default ``core_attn``). Each module frees
some of a layer's saved tensors and runs part of its forward pass again in the backward pass
(phase "recompute" of piper/frontend/operations.py). In Megatron-Core's words
(``transformer_config.py``): ``moe_act``, ``layernorm`` and ``mla_up_proj`` use output-discarding
checkpointing (the module's output is freed once its consumers ran and rebuilt before their
backward pass), ``core_attn``, ``mlp``, ``moe`` and ``shared_experts`` normal checkpointing (the
module keeps only its input). With Transformer Engine's layer spec, which the cost model assumes:

==================  ==================================================  ========================================
module              recomputed (forward again in the backward pass)     freed, per micro-batch and device
==================  ==================================================  ========================================
``core_attn``       the core attention (one fused kernel, or QK^T,       the score tensors (unfused) or the
                    softmax, dropout and attention x V)                  log-sum-exp (fused) ([K22] Section 5)
``layernorm``       the norms that are modules of their own: the pre-     the norm's output, counted as the next
                    MLP norm of an MoE layer and the input norm of an    product's input (q T h, / t with
                    MLA layer. A dense layer's norms are fused into      sequence parallelism)
                    the next product (TE's LayerNormLinear): nothing
``moe_act``         the routed experts' activation                       its output, the experts' FC2 input:
                                                                         p rows F / e_t
``mlp``             a dense MLP: its norm, all-gather, FC1, activation,  FC1's input and the MLP's inner tensors
                    FC2 and reduce-scatter (not MoE layers)              (the input stays: the checkpoint's)
``moe``             the whole MoE block: router, permutation, dispatch,  every tensor of the block but its input
                    experts, combine and shared experts
``shared_experts``  the shared experts' MLP, its all-gather and          their inner tensors (and under FP8
                    reduce-scatter included                              TE's FP8 copy of their input)
``mla_up_proj``     MLA's up projections, with the latents' norms TE     the per-head Q, K, V: p a (2 d_qk +
                    fuses into them, and the rotary embedding            d_v) T / t, and the norms' outputs
                                                                         q (q_lora + kv_lora) T
==================  ==================================================  ========================================

Megatron-Core nests the checkpoints and does not merge them (``moe_layer.py``, ``experts.py``): with
``moe`` and ``moe_act`` (or ``shared_experts``) the block's replay runs the experts' activation (the
shared experts) once and their own recomputation once more, three forward runs in all; the memory is
``moe``'s. The cost model prices that.

A module that applies to no layer of the model is refused (:func:`check_modules_for_model`),
as Megatron-Core refuses ``mla_up_proj`` without MLA and ``moe_act`` without grouped GEMMs:
nothing is silently ignored. Hardware FLOPs count the recomputed products
(:func:`piper.frontend.costs.recomputed_forward_flops`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piper.core.errors import FrontendError
from piper.core.problem import short_repr

__all__ = [
    "DEFAULT_RECOMPUTE_MODULES",
    "RECOMPUTE_MODULES",
    "RecomputedParts",
    "check_modules_for_model",
    "check_recompute_modules",
    "recomputed_parts",
]

#: the modules of Megatron-Core's ``--recompute-modules`` (``TransformerConfig.recompute_modules``'
#: allowed set, Megatron-Core 0.16), in the order the project writes them
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mlp", "moe", "shared_experts", "mla_up_proj")
#: Megatron-Core's default: selective recomputation recomputes the core attention ([K22] Section 5)
DEFAULT_RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn",)


def check_recompute_modules(modules: object, where: str = "recompute_modules") -> tuple[str, ...]:
    """``modules`` as the canonical tuple (in :data:`RECOMPUTE_MODULES` order), or a
    :class:`FrontendError` naming ``where`` and the bad entry: a non-empty list of known, distinct
    module names."""
    if isinstance(modules, str) or not isinstance(modules, Sequence):
        raise FrontendError(f"{where} must be a list of module names ({', '.join(RECOMPUTE_MODULES)}), "
                            f"got {_short(modules)}")
    if not modules:
        raise FrontendError(f"{where}: give at least one module ({', '.join(RECOMPUTE_MODULES)}); selective "
                            "recomputation of no module recomputes nothing (recompute none says that)")
    seen: set[str] = set()
    for name in modules:
        if not isinstance(name, str) or name not in RECOMPUTE_MODULES:
            raise FrontendError(f"{where}: unknown module {_short(name)}; known: {', '.join(RECOMPUTE_MODULES)}")
        if name in seen:
            raise FrontendError(f"{where}: module {name!r} given twice")
        seen.add(name)
    return tuple(m for m in RECOMPUTE_MODULES if m in seen)


def _short(value: object, limit: int = 60) -> str:
    """:func:`~piper.core.problem.short_repr`, but a long string is cut inside its quotes, which stay
    closed (``'aaa...'...``)."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + "..."
    return short_repr(value)


@dataclass(frozen=True)
class RecomputedParts:
    """The parts of one layer that its recomputation setting recomputes (module docstring)."""

    #: the core attention (dense, or MLA's fused kernel)
    core_attention: bool = False
    #: the input norm of an MLA layer (a module of its own there)
    input_norm: bool = False
    #: the pre-MLP norm of an MoE layer (a module of its own there)
    pre_mlp_norm: bool = False
    #: a dense layer's MLP, with its fused norm and sequence parallelism's collectives
    dense_mlp: bool = False
    #: an MoE layer's whole block (router, dispatch, experts, combine, shared experts)
    moe_block: bool = False
    #: the routed experts' activation (output-discarding; inside a recomputed block, once more)
    expert_activation: bool = False
    #: the shared experts' MLP (inside a recomputed block, once more)
    shared_experts: bool = False
    #: MLA's up projections and rotary embedding (output-discarding)
    mla_up_projection: bool = False


def recomputed_parts(recompute: str, modules: Sequence[str], *, moe_layer: bool, mla: bool,
                     shared_experts: bool = False) -> RecomputedParts:
    """What ``selective`` recomputation of ``modules`` recomputes in a layer (an MoE layer when
    ``moe_layer``, with shared experts when ``shared_experts``; MLA attention when ``mla``); nothing
    for ``none``, and nothing here for ``full`` (which recomputes the whole layer)."""
    if recompute != "selective":
        return RecomputedParts()
    m = set(modules)
    return RecomputedParts(
        core_attention="core_attn" in m,
        input_norm="layernorm" in m and mla,
        pre_mlp_norm="layernorm" in m and moe_layer,
        dense_mlp="mlp" in m and not moe_layer,
        moe_block="moe" in m and moe_layer,
        expert_activation="moe_act" in m and moe_layer,
        shared_experts="shared_experts" in m and moe_layer and shared_experts,
        mla_up_projection="mla_up_proj" in m and mla,
    )


def check_modules_for_model(modules: Sequence[str], *, name: str, moe_layers: int, dense_layers: int,
                            mla: bool, shared_experts: bool, fp8: bool = False) -> None:
    """Refuse a module that applies to no layer of the model ``name`` (``moe_layers`` MoE and
    ``dense_layers`` dense-MLP layers, MLA attention when ``mla``, shared experts when
    ``shared_experts``), or that Megatron-Core refuses with FP8 (``fp8``: Transformer Engine's delayed
    scaling, as the cost model and the export assume, cannot recompute ``moe_act`` or ``layernorm``,
    transformer_config.py): a :class:`FrontendError` naming the module and why."""
    if fp8:
        for module in ("layernorm", "moe_act"):
            if module in modules:
                raise FrontendError(f"recompute module {module!r} with FP8: Megatron-Core refuses moe_act and "
                                    "layernorm recomputation under FP8 delayed scaling (Transformer Engine's "
                                    "DelayedScaling, which the FP8 costs assume)")
    why = {
        "layernorm": None if (moe_layers or mla) else
        "its layer norms are fused into the next product (Transformer Engine's LayerNormLinear), which "
        "Megatron-Core's layernorm recomputation leaves as they are; only MoE layers' pre-MLP norm and MLA "
        "layers' input norm are recomputed",
        "moe_act": None if moe_layers else "it has no MoE layer (Megatron-Core: moe_act needs --moe-grouped-gemm)",
        "moe": None if moe_layers else "it has no MoE layer",
        "shared_experts": None if (moe_layers and shared_experts) else "it has no shared experts",
        "mlp": None if dense_layers else "it has no dense MLP layer (moe recomputes an MoE layer's block)",
        "mla_up_proj": None if mla else "it has no multi-latent attention (Megatron-Core refuses it without MLA)",
        "core_attn": None,
    }
    for module in modules:
        reason = why.get(module)
        if reason is not None:
            raise FrontendError(f"recompute module {module!r} recomputes nothing in {name}: {reason}")
