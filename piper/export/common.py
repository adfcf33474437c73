"""What every export target shares: the layer mapping, the meaning of TMPC ids, and the
expressibility rules E1-E7 (docs/export.md).

:func:`prepare` reads a (problem, plan) pair into an :class:`ExportPlan`: per stage its
(d, t), the transformer layers it holds (positions 0..l-1 in chain order), whether it holds
the embedding side and the head side, and per layer the recomputation kind of its TMPC.
Anything that no target can express is refused here with :class:`ExportError`; what is
target-specific (one recomputation setting, sequence parallelism, selective recomputation)
is checked by the target modules with :func:`refuse`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from piper.core.errors import ExportError
from piper.core.evaluate import check_plan, evaluate
from piper.core.plan import Plan
from piper.core.limits import MAX_COUNT
from piper.core.problem import ACTIVATION_RECOMP, VANILLA, Problem, short_repr

__all__ = [
    "RULES",
    "TARGETS",
    "TARGET_NAMES",
    "Export",
    "ExportError",
    "ExportPlan",
    "LayerMap",
    "ModelInfo",
    "StageSpec",
    "check_record_graph",
    "format_counts",
    "map_layers",
    "model_info",
    "model_record_error",
    "moe_flags",
    "moe_layer_flags",
    "prepare",
    "refuse",
    "selective_words",
    "tmpc_meaning",
]

#: export targets (CLI ``--to``) and their display names
TARGET_NAMES: Mapping[str, str] = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "torchtitan": "torchtitan"}
TARGETS = tuple(TARGET_NAMES)

#: the expressibility rules, as refusals name them (docs/export.md, "Refusals")
RULES: Mapping[str, str] = {
    "E1": "layer mapping: the transformer layers are known and form a chain, every other node comes before the first or after the last",
    "E2": "the embedding side sits in the first stage and the head side in the last",
    "E3": "one (d, t) for every stage",
    "E4": "every TMPC has a counterpart in the target",
    "E5": "one sequence-parallel setting for the whole model",
    "E6": "the recomputation fits the target's one setting",
    "E7": "the micro-batch size (sequences per Piper sample) is known",
    "E8": "the target runs the plan's pipeline schedule (DeepSpeed: 1F1B only)",
    "E9": "one expert layout (e, e_t) for every mixture-of-experts layer, which the target can run",
}

#: the node name the paper's BERT workload gives its transformer layers
TRANSFORMER_NAME = "ParallelTransformerLayer"
RECOMPUTE_KINDS = ("none", "selective", "full")


def refuse(target: str, rule: str, what: str, *, stage: int | None = None, hint: str = "",
           recompute: bool = False) -> ExportError:
    """The :class:`ExportError` for ``target``: "cannot export to T: WHAT (rule En: ...)[; HINT]".
    ``recompute``: the refusal is about the recomputation only; the message then points to
    ``--fit-recompute``."""
    name = TARGET_NAMES.get(target, target)
    msg = f"cannot export to {name}: {what} (rule {rule}: {RULES[rule]})"
    if recompute and not hint:
        hint = ("or export with --fit-recompute: the target's single recomputation setting that the evaluator "
                "scores best for this split and (d, t), re-scored and reported")
    if hint:
        msg += f"; {hint}"
    return ExportError(msg, rule=rule, target=target, stage=stage, recompute=recompute)


# ---------------------------------------------------------------------------------
# the model record (piper/frontend/workload.py model_record)
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    """The workload's ``model`` record: counts; bytes per element for ``precision_bytes``;
    sequences for ``micro_batch`` and ``global_batch``."""

    name: str
    layers: int
    hidden_size: int
    ffn_hidden_size: int
    attention_heads: int
    kv_heads: int
    vocab_size: int
    seq_length: int
    ffn_kind: str
    norm: str
    linear_bias: bool
    learned_positions: bool
    tied_embeddings: bool
    precision_bytes: int
    micro_batch: int
    global_batch: int
    distributed_optimizer: bool
    #: c, the context-parallel size the workload was built for (``contextParallel``, absent: 1;
    #: docs/problem.md §11): a stage's t is the tensor-parallel size x c
    context_parallel: int = 1
    #: the optional MoE record (``model.moe``: experts, topK, expertFfnHiddenSize, ...; issue 31)
    moe: Mapping[str, Any] | None = None
    #: the optional MLA record (``model.mla``: qLoraRank, kvLoraRank, qkNopeHeadDim, qkRopeHeadDim, vHeadDim)
    mla: Mapping[str, Any] | None = None
    #: the head width when it is not hidden / heads (``model.attentionHeadDim``)
    attention_head_dim: int | None = None
    #: the MoE token dispatcher the costs were priced for (``model.tokenDispatcher``, absent:
    #: "alltoall"; "flex": DeepEP / HybridEP)
    token_dispatcher: str = "alltoall"
    #: w, the sliding attention window in tokens (``model.slidingWindow.tokens``), of the 0-based
    #: layers ``sliding_window_layers`` (``model.slidingWindow.layers``); None: full attention everywhere
    sliding_window: int | None = None
    sliding_window_layers: tuple[int, ...] = ()
    #: each transformer layer's context-parallel scheme, one of piper.frontend.context.CP_COMM_TYPES
    #: (``model.cpCommTypes``; absent: "p2p" on every layer)
    cp_comm_types: tuple[str, ...] = ()
    #: c1 of the a2a+p2p scheme (``model.cpA2aSize``): the all-to-all groups' size; None without it
    cp_a2a_size: int | None = None
    #: the matrix products' precision the costs were priced for (``model.precision``, one of
    #: piper.frontend.config.PRECISIONS; absent: "bf16")
    precision: str = "bf16"
    #: what the TMPC "selective" recomputes, Megatron-Core's module names (``model.recomputeModules``;
    #: absent: its default, core_attn; piper/frontend/recompute.py)
    recompute_modules: tuple[str, ...] = ("core_attn",)

    def cp_comm_type_of(self, layer: int) -> str:
        """The context-parallel scheme of the 0-based transformer ``layer``."""
        return self.cp_comm_types[layer] if self.cp_comm_types else "p2p"


#: the optional records' fields: key -> (type, may be 0 / null)
_MOE_FIELDS: dict[str, tuple[type, bool]] = {
    "experts": (int, False), "topK": (int, False), "expertFfnHiddenSize": (int, False),
    "sharedFfnHiddenSize": (int, True), "firstDenseLayers": (int, True), "layerFreq": (int, False),
    "layerOffset": (int, True), "routerScore": (str, False), "capacityFactor": (float, True)}
_MLA_FIELDS: dict[str, tuple[type, bool]] = {
    "qLoraRank": (int, True), "kvLoraRank": (int, False), "qkNopeHeadDim": (int, False),
    "qkRopeHeadDim": (int, False), "vHeadDim": (int, False)}


def _check_moe_record(moe: Mapping[str, Any], layers: int) -> None:
    """``model.moe`` beyond its fields' types (rule E7), as piper/frontend/moe.py checks an MoE
    configuration: topK at most the experts, a router score the front end knows, a capacity factor
    in [1, 1000], and at least one MoE layer among the ``layers``."""
    from piper.frontend.moe import ROUTER_SCORES  # the workload's vocabulary

    if moe["topK"] > moe["experts"]:
        raise ExportError(f"the workload's model.moe.topK ({moe['topK']}) must be at most its experts "
                          f"({moe['experts']})", rule="E7")
    if moe["routerScore"] not in ROUTER_SCORES:
        raise ExportError(f"the workload's model.moe.routerScore must be one of {', '.join(ROUTER_SCORES)}, got "
                          f"{short_repr(moe['routerScore'])}", rule="E7")
    c = moe.get("capacityFactor")
    if c is not None and c > 1e3:
        raise ExportError(f"the workload's model.moe.capacityFactor must be in [1, 1000] or null (dropless), got {c!r}",
                          rule="E7")
    if not any(moe_flags(layers, moe.get("firstDenseLayers") or 0, moe["layerFreq"], moe.get("layerOffset") or 0)):
        raise ExportError(f"the workload's model.moe makes none of its {layers} layers an MoE layer "
                          "(firstDenseLayers, layerFreq, layerOffset)", rule="E7")


def _optional_record(raw: Mapping[str, Any], key: str, spec: dict[str, tuple[type, bool]]) -> Mapping[str, Any] | None:
    """``model.KEY`` checked field by field (rule E7), or None when absent."""
    rec = raw.get(key)
    if rec is None:
        return None
    if not isinstance(rec, Mapping):
        raise ExportError(f"the workload's model.{key} must be an object, got {type(rec).__name__}", rule="E7")
    unknown = sorted(str(k) for k in rec if k not in spec)
    if unknown:
        raise ExportError(f"the workload's model.{key} has an unknown key {unknown[0]!r} (known: "
                          f"{', '.join(spec)})", rule="E7")
    for name, (typ, zero_ok) in spec.items():
        value = rec.get(name)
        if value is None and zero_ok:
            continue
        if name not in rec:
            raise ExportError(f"the workload's model.{key} has no {name!r}", rule="E7")
        if typ is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1
        elif typ is int:
            ok = (isinstance(value, int) and not isinstance(value, bool)
                  and (0 if zero_ok else 1) <= value <= MAX_COUNT)
        else:
            ok = isinstance(value, typ)
        if not ok:
            raise ExportError(f"the workload's model.{key}.{name} must be "
                              f"{f'a whole number <= {MAX_COUNT}' if typ is int else 'a number >= 1' if typ is float else typ.__name__}"
                              f", got {value!r}", rule="E7")
    return rec


_MODEL_FIELDS: tuple[tuple[str, str, type], ...] = (
    ("name", "name", str), ("layers", "layers", int), ("hidden_size", "hiddenSize", int),
    ("ffn_hidden_size", "ffnHiddenSize", int), ("attention_heads", "attentionHeads", int),
    ("kv_heads", "kvHeads", int), ("vocab_size", "vocabSize", int), ("seq_length", "seqLength", int),
    ("ffn_kind", "ffnKind", str), ("norm", "norm", str), ("linear_bias", "linearBias", bool),
    ("learned_positions", "learnedPositions", bool), ("tied_embeddings", "tiedEmbeddings", bool),
    ("precision_bytes", "precisionBytes", int), ("micro_batch", "microBatch", int),
    ("global_batch", "globalBatch", int), ("distributed_optimizer", "distributedOptimizer", bool),
)


#: every key of the model record (piper/frontend/workload.py model_record): another is refused (rule
#: E7), so that nothing the record says is silently ignored
MODEL_KEYS = frozenset({
    *(key for _, key, _ in _MODEL_FIELDS), "precision", "dropout", "gradBytes", "contextParallel", "cpCommTypes",
    "cpA2aSize", "attentionHeadDim", "moe", "mla", "tokenDispatcher", "slidingWindow", "recomputeModules"})


def model_info(problem: Problem) -> ModelInfo | None:
    """The workload's ``model`` record, or None when it has none (profiled workloads).
    A record with a missing or mistyped field is refused (rule E7), naming the field."""
    raw = problem.extra.get("model")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ExportError(f"the workload's 'model' must be an object, got {type(raw).__name__}", rule="E7")
    unknown = sorted(str(k) for k in raw if k not in MODEL_KEYS)
    if unknown:
        raise ExportError(f"the workload's model record has an unknown key {unknown[0]!r} (known: "
                          f"{', '.join(sorted(MODEL_KEYS))})", rule="E7")
    values: dict[str, Any] = {}
    for attr, key, typ in _MODEL_FIELDS:
        if key not in raw:
            raise ExportError(f"the workload's 'model' has no {key!r}", rule="E7")
        value = raw[key]
        ok = isinstance(value, typ) and (typ is bool or not isinstance(value, bool))
        if typ is int and ok and not 1 <= value <= MAX_COUNT:
            ok = False
        if not ok:
            raise ExportError(f"the workload's model.{key} must be "
                              f"{f'a whole number in 1..{MAX_COUNT}' if typ is int else typ.__name__}, "
                              f"got {short_repr(value)}", rule="E7")
        values[attr] = value
    _check_record_shape(raw, values)
    c = raw.get("contextParallel", 1)
    if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_COUNT:
        raise ExportError(f"the workload's model.contextParallel must be a whole number in 1..{MAX_COUNT}, got "
                          f"{short_repr(c)}", rule="E7")
    head_dim = raw.get("attentionHeadDim")
    if head_dim is not None and (not isinstance(head_dim, int) or isinstance(head_dim, bool)
                                 or not 1 <= head_dim <= MAX_COUNT):
        raise ExportError(f"the workload's model.attentionHeadDim must be a whole number in 1..{MAX_COUNT}, got "
                          f"{short_repr(head_dim)}", rule="E7")
    from piper.frontend.workload import TOKEN_DISPATCHERS  # the workload's vocabulary

    dispatcher = raw.get("tokenDispatcher", "alltoall")
    if dispatcher not in TOKEN_DISPATCHERS:
        raise ExportError(f"the workload's model.tokenDispatcher must be one of {', '.join(TOKEN_DISPATCHERS)}, "
                          f"got {dispatcher!r}", rule="E7")
    from piper.frontend.config import FFN_KINDS, NORM_KINDS, PRECISIONS  # the workload's vocabulary

    for key, kinds in (("ffnKind", FFN_KINDS), ("norm", NORM_KINDS)):
        if raw[key] not in kinds:
            raise ExportError(f"the workload's model.{key} must be one of {', '.join(kinds)}, got {raw[key]!r}",
                              rule="E7")

    precision = raw.get("precision", "bf16")
    if precision not in PRECISIONS:
        raise ExportError(f"the workload's model.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}",
                          rule="E7")
    window, windowed = _sliding_window(raw, values["layers"])
    moe = _optional_record(raw, "moe", _MOE_FIELDS)
    if moe is not None:
        _check_moe_record(moe, values["layers"])
    info = ModelInfo(**values, context_parallel=c, moe=moe,
                     mla=_optional_record(raw, "mla", _MLA_FIELDS), attention_head_dim=head_dim,
                     token_dispatcher=dispatcher, sliding_window=window, sliding_window_layers=windowed,
                     cp_comm_types=_cp_comm_types(raw, values["layers"]), cp_a2a_size=_cp_a2a_size(raw, c),
                     precision=precision, recompute_modules=_recompute_modules(raw))
    _check_modules_for(info)
    _check_record_combinations(info, raw)
    return info


def _check_record_combinations(info: ModelInfo, raw: Mapping[str, Any]) -> None:
    """Combinations the front end never writes, because it refuses them (rule E7): an empty name, a
    sliding window with MLA (piper/frontend/config.py), a token dispatcher other than the default
    without MoE, per-layer context-parallel schemes at c = 1 (piper/frontend/workload.py writes them
    only at c > 1), and a windowed layer on a ring scheme at c > 1 (Transformer Engine's ring refuses a
    window: piper/frontend/context.py)."""
    if not info.name:
        raise ExportError("the workload's model.name must be a non-empty string", rule="E7")
    if info.sliding_window is not None and info.mla is not None:
        raise ExportError("the workload's model has both slidingWindow and mla: a sliding window with MLA is not "
                          "modelled (the front end refuses it)", rule="E7")
    if "tokenDispatcher" in raw and info.moe is None:
        raise ExportError(f"the workload's model.tokenDispatcher ({info.token_dispatcher!r}) needs a model.moe: "
                          "a dense model dispatches no tokens", rule="E7")
    if "cpCommTypes" in raw and info.context_parallel == 1:
        raise ExportError("the workload's model.cpCommTypes is given at contextParallel 1, where no "
                          "context-parallel scheme runs", rule="E7")
    if info.context_parallel > 1:
        for i in info.sliding_window_layers:
            kind = info.cp_comm_type_of(i)
            if kind in ("p2p", "a2a+p2p"):
                raise ExportError(f"the workload's layer {i} (0-based) attends within a sliding window but runs the "
                                  f"{kind} context-parallel scheme (model.cpCommTypes; absent: p2p), which Transformer "
                                  "Engine's ring refuses", rule="E7")


def _check_record_shape(raw: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    """The record's fields beyond their types (rule E7), as the front end's configuration checks
    them (piper/frontend/config.py, workload.py): ``dropout`` true or false, ``gradBytes`` 2 or 4,
    the heads dividing the width (unless ``attentionHeadDim`` or ``mla`` sets it) and ``kvHeads``
    dividing the heads."""
    dropout = raw.get("dropout", False)
    if not isinstance(dropout, bool):
        raise ExportError(f"the workload's model.dropout must be true or false, got {short_repr(dropout)}", rule="E7")
    grad = raw.get("gradBytes", 4)
    if isinstance(grad, bool) or not isinstance(grad, int) or grad not in (2, 4):
        raise ExportError(f"the workload's model.gradBytes must be 2 or 4, got {short_repr(grad)}", rule="E7")
    a, kv, h = values["attention_heads"], values["kv_heads"], values["hidden_size"]
    if raw.get("attentionHeadDim") is None and raw.get("mla") is None and h % a:
        raise ExportError(f"the workload's model.attentionHeads ({a}) must divide its hiddenSize ({h})", rule="E7")
    if a % kv:
        raise ExportError(f"the workload's model.kvHeads ({kv}) must divide its attentionHeads ({a})", rule="E7")


def check_record_graph(problem: Problem, info: ModelInfo, lm: LayerMap | None = None) -> None:
    """The model record against the workload's layer graph (rules E1 and E7): as many transformer
    nodes as ``layers``, and the layers with expert terms in their TMPCs exactly the MoE layers the
    ``moe`` record names (none without it). ``lm``: the graph's :func:`map_layers`, when the caller
    has it."""
    if lm is None:
        lm = map_layers(problem)
    if info.layers != len(lm.layers):
        raise ExportError(f"the workload's model record says {info.layers} layers, its graph has "
                          f"{len(lm.layers)} transformer nodes", rule="E1")
    flags = moe_layer_flags(info)
    for i, v in enumerate(lm.layers):
        nd = problem.node_by_id[v]
        expert = any(c.has_expert_terms for cs in nd.tmpcs.values() for c in cs)
        if expert != bool(flags[i]):
            said = ("has no 'moe': the export would write a dense model" if info.moe is None else
                    f"makes layer {i} {'an MoE' if flags[i] else 'a dense'} layer (firstDenseLayers, layerFreq, layerOffset)")
            raise ExportError(f"the workload's transformer node {nd.label} (layer {i}) has "
                              f"{'expert' if expert else 'no expert'} terms in its TMPCs but the model record {said}",
                              rule="E7")


def model_record_error(problem: Problem) -> str | None:
    """What :func:`model_info` and :func:`check_record_graph` refuse in the workload's ``model``
    record, in one line naming the field; None when the record is usable or absent."""
    try:
        info = model_info(problem)
        if info is not None:
            check_record_graph(problem, info)
    except ExportError as exc:
        return str(exc)
    return None


def moe_flags(layers: int, first_dense: int, freq: int, offset: int) -> list[int]:
    """1 for each MoE layer, 0 for a dense one: layer i is MoE when i >= ``first_dense`` and
    (i + ``offset``) % ``freq`` == 0 (the model record's ``firstDenseLayers``, ``layerFreq``, ``layerOffset``)."""
    return [1 if i >= first_dense and (i + offset) % freq == 0 else 0 for i in range(layers)]


def moe_layer_flags(info: ModelInfo) -> list[int]:
    """:func:`moe_flags` of the model record; all 0 without an MoE record."""
    moe = info.moe
    if moe is None:
        return [0] * info.layers
    return moe_flags(info.layers, moe.get("firstDenseLayers") or 0, moe["layerFreq"], moe.get("layerOffset") or 0)


def _check_modules_for(info: ModelInfo) -> None:
    """The record's ``recomputeModules`` against its model (rule E7): a module that recomputes nothing
    in it, or one Megatron-Core refuses with its FP8, as the front end refuses them
    (piper/frontend/recompute.py ``check_modules_for_model``)."""
    from piper.core.errors import FrontendError
    from piper.frontend.recompute import check_modules_for_model  # the workload's vocabulary

    moe = info.moe
    moe_layers = 0 if moe is None else sum(moe_layer_flags(info))
    try:
        check_modules_for_model(info.recompute_modules, name=info.name, moe_layers=moe_layers,
                                dense_layers=info.layers - moe_layers, mla=info.mla is not None,
                                shared_experts=bool(moe is not None and moe.get("sharedFfnHiddenSize")),
                                fp8=info.precision == "fp8")
    except FrontendError as exc:
        raise ExportError(f"the workload's model.recomputeModules: {exc}", rule="E7") from None


def selective_words(ep: ExportPlan) -> str:
    """What the plan's selective recomputation recomputes, in words: "the core attention" (Megatron-Core's
    default) or the workload's ``recomputeModules``."""
    modules = ep.model.recompute_modules if ep.model is not None else ("core_attn",)
    return "the core attention" if modules == ("core_attn",) else "the modules " + ", ".join(modules)


def _recompute_modules(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """``model.recomputeModules`` (a non-empty list of distinct Megatron-Core module names) checked (rule E7)."""
    from piper.core.errors import FrontendError
    from piper.frontend.recompute import DEFAULT_RECOMPUTE_MODULES, check_recompute_modules  # the workload's vocabulary

    if "recomputeModules" not in raw:
        return DEFAULT_RECOMPUTE_MODULES
    try:
        return check_recompute_modules(raw["recomputeModules"], "the workload's model.recomputeModules")
    except FrontendError as exc:
        raise ExportError(str(exc), rule="E7") from None


def _cp_a2a_size(raw: Mapping[str, Any], c: int) -> int | None:
    """``model.cpA2aSize`` checked (rule E7): a whole number in (1, c) dividing c, present exactly
    when some layer runs a2a+p2p."""
    size = raw.get("cpA2aSize")
    hierarchical = "a2a+p2p" in (raw.get("cpCommTypes") or ())
    if size is None and not hierarchical:
        return None
    if (not isinstance(size, int) or isinstance(size, bool) or not 1 < size < c or c % size) or not hierarchical:
        raise ExportError(f"the workload's model.cpA2aSize must be a whole number dividing contextParallel {c}, "
                          f"strictly between 1 and it, given with an a2a+p2p layer; got {size!r}", rule="E7")
    return size


def _cp_comm_types(raw: Mapping[str, Any], layers: int) -> tuple[str, ...]:
    """``model.cpCommTypes`` (one of the front end's context-parallel schemes per layer) checked (rule E7)."""
    from piper.frontend.context import CP_COMM_TYPES  # the workload's vocabulary

    types = raw.get("cpCommTypes")
    if types is None:
        return ()
    if (not isinstance(types, list) or len(types) != layers
            or not all(isinstance(x, str) and x in CP_COMM_TYPES for x in types)):
        raise ExportError(f"the workload's model.cpCommTypes must be a list of {layers} of "
                          f"{', '.join(CP_COMM_TYPES)}, got {types!r:.80}", rule="E7")
    return tuple(types)


def _sliding_window(raw: Mapping[str, Any], layers: int) -> tuple[int | None, tuple[int, ...]]:
    """``model.slidingWindow`` ({"tokens": w, "layers": [0-based indices]}) checked (rule E7)."""
    rec = raw.get("slidingWindow")
    if rec is None:
        return None, ()
    if not isinstance(rec, Mapping):
        raise ExportError(f"the workload's model.slidingWindow must be an object, got {type(rec).__name__}", rule="E7")
    unknown = sorted(str(k) for k in rec if k not in ("tokens", "layers"))
    if unknown:
        raise ExportError(f"the workload's model.slidingWindow has an unknown key {unknown[0]!r} (known: tokens, "
                          "layers)", rule="E7")
    w, where = rec.get("tokens"), rec.get("layers")
    if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= MAX_COUNT:
        raise ExportError(f"the workload's model.slidingWindow.tokens must be a whole number in 1..{MAX_COUNT}, got "
                          f"{short_repr(w)}", rule="E7")
    if (not isinstance(where, list) or not where
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in where)
            or any(a >= b for a, b in zip(where, where[1:]))):
        raise ExportError(f"the workload's model.slidingWindow.layers must be increasing layer indices in [0, {layers}), "
                          f"got {where!r:.80}", rule="E7")
    return w, tuple(where)


# ---------------------------------------------------------------------------------
# layer mapping (rule E1)
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerMap:
    """Which node is which transformer layer.

    ``layers[i]`` is the node id of transformer layer i (chain order); ``pre`` are the other
    nodes before the first layer (embedding, inputs), ``post`` those after the last (final
    norm, output head, pooler); ``how`` says how the layers were found."""

    layers: tuple[int, ...]
    pre: frozenset[int]
    post: frozenset[int]
    how: str

    @property
    def position(self) -> dict[int, int]:
        """node id -> layer index (0-based)."""
        return {v: i for i, v in enumerate(self.layers)}


def map_layers(problem: Problem) -> LayerMap:
    """Find the transformer layers: nodes of ``kind`` "transformer" (the model front end,
    ordered by ``layerIndex``), else nodes named ``ParallelTransformerLayer`` (the paper's
    BERT profile, in topological order). They must form a chain (an edge from each layer to
    the next) and every other node must come before the first layer or after the last.
    Raises :class:`ExportError` (rule E1) saying why the layers cannot be mapped."""
    kinds = [nd for nd in problem.nodes if nd.kind == "transformer"]
    if kinds:
        how = "nodes of kind 'transformer', ordered by layerIndex"
        if any(nd.layer_index is None for nd in kinds):
            bad = next(nd for nd in kinds if nd.layer_index is None)
            raise ExportError(f"cannot map layers: transformer node {bad.id} has no layerIndex", rule="E1")
        by_index = sorted(kinds, key=lambda nd: (nd.layer_index, nd.id))
        indices = [nd.layer_index for nd in by_index]
        if indices != list(range(len(by_index))):
            from piper.frontend.operations import NODE_KINDS  # the workload's vocabulary

            odd = next((nd for nd in problem.nodes if nd.kind is not None and nd.kind not in NODE_KINDS), None)
            hint = ("" if odd is None else
                    f" (node {odd.id} has kind {short_repr(odd.kind)}, not one of {', '.join(NODE_KINDS)})")
            raise ExportError(f"cannot map layers: the transformer nodes' layerIndex values are {indices[:8]}"
                              f"{'...' if len(indices) > 8 else ''}, not 0..{len(by_index) - 1} once each{hint}",
                              rule="E1")
        layers = tuple(nd.id for nd in by_index)
    else:
        named = {nd.id for nd in problem.nodes if nd.name == TRANSFORMER_NAME}
        if not named:
            raise ExportError(
                "cannot map layers: no node has kind 'transformer' (workloads from `python -m piper model`) "
                f"or the name {TRANSFORMER_NAME!r} (the paper's BERT profile), so which node is which "
                "transformer layer is unknown", rule="E1")
        how = f"nodes named {TRANSFORMER_NAME!r}, in topological order"
        layers = tuple(v for v in problem.topological_order if v in named)
    g = nx.DiGraph()
    g.add_nodes_from(nd.id for nd in problem.nodes)
    g.add_edges_from((e.u, e.v) for e in problem.edges)
    for a, b in zip(layers, layers[1:]):
        if not g.has_edge(a, b):
            raise ExportError(f"cannot map layers: the layer graph is not a chain: no edge from transformer layer "
                              f"node {a} to the next one, node {b}", rule="E1")
    layer_set = set(layers)
    after_first = nx.descendants(g, layers[0])
    after_last = nx.descendants(g, layers[-1])
    pre, post = set(), set()
    for nd in problem.nodes:
        v = nd.id
        if v in layer_set:
            continue
        if v in after_last:
            post.add(v)
        elif v not in after_first:
            pre.add(v)
        else:
            raise ExportError(f"cannot map layers: node {nd.label} sits between transformer layers (after node "
                              f"{layers[0]}, not after node {layers[-1]}); the targets hold only transformer layers "
                              "between the embedding and the head", rule="E1")
    return LayerMap(layers, frozenset(pre), frozenset(post), how)


# ---------------------------------------------------------------------------------
# TMPC ids
# ---------------------------------------------------------------------------------


def tmpc_meaning(tmpc_id: str) -> tuple[str, bool] | None:
    """``(recompute kind, sequence parallel)`` of a TMPC id, or None when unknown.

    The model front end's ids (``none``, ``selective``, ``full``, each optionally ``+sp``;
    :mod:`piper.frontend.tmpc`), and the paper's BERT ids: ``vanilla`` = no recomputation,
    ``activation recomp`` = full recomputation of the layer (neither uses sequence parallelism)."""
    if tmpc_id == VANILLA:
        return "none", False
    if tmpc_id == ACTIVATION_RECOMP:
        return "full", False
    from piper.core.errors import FrontendError
    from piper.frontend.tmpc import parse_tmpc_id

    try:
        return parse_tmpc_id(tmpc_id)
    except FrontendError:
        return None


_KNOWN_IDS = "none, selective, full (each optionally +sp), vanilla, activation recomp"


# ---------------------------------------------------------------------------------
# the plan, read for export
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageSpec:
    """One pipeline stage as the targets see it (``index`` is 1-based); for an interleaved plan,
    one chunk (a virtual stage, in pipeline order: chunk j runs on device group (j - 1) mod p)."""

    index: int
    d: int
    t: int
    #: holds the embedding side (nodes before the first transformer layer)
    pre: bool
    #: holds the head side (nodes after the last transformer layer)
    post: bool
    #: transformer layer positions (0-based, consecutive)
    layers: tuple[int, ...]
    #: recomputation kind per layer of ``layers``: "none", "selective" or "full"
    recompute: tuple[str, ...]
    #: sequence parallelism of each node's TMPC in the stage (all nodes, not only layers)
    sequence_parallel: tuple[bool, ...]

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def count(self, kind: str) -> int:
        """Layers of this stage whose TMPC recomputes ``kind``."""
        return sum(1 for r in self.recompute if r == kind)


@dataclass(frozen=True)
class ExportPlan:
    """A plan that passed the common rules E1, E2, E4 (TMPC ids known), E7, ready for a target."""

    target: str
    stages: tuple[StageSpec, ...]
    layer_map: LayerMap
    #: the workload's model record (None for profiled workloads)
    model: ModelInfo | None
    #: N, micro-batches per batch (the effective value, after any -N flag)
    microbatches: int
    #: sequences per micro-batch (one Piper sample)
    micro_batch: int
    #: some chosen TMPC has sharded state (memoryUsageShardedB > 0): ZeRO-1 / distributed optimizer
    sharded: bool
    #: devices in the whole cluster (k)
    devices: int
    #: the plan does not fit the memory limit (the evaluator's score)
    oom: bool
    notes: tuple[str, ...]
    #: v: chunks per device group (1: 1F1B, ``stages`` are the stages; >= 2: the interleaved
    #: schedule, ``stages`` are the p v chunks in pipeline order)
    virtual_stages: int = 1
    #: (e, e_t) of the mixture-of-experts layers' TMPCs (rule E9: one for all); (1, 1) without
    expert_layout: tuple[int, int] = (1, 1)

    @property
    def pipeline(self) -> int:
        """p: the pipeline's device groups (stages for 1F1B)."""
        return len(self.stages) // self.virtual_stages

    @property
    def interleaved(self) -> bool:
        return self.virtual_stages > 1

    @property
    def num_layers(self) -> int:
        return len(self.layer_map.layers)

    @property
    def global_batch(self) -> int:
        """Sequences per iteration: N x micro-batch."""
        return self.microbatches * self.micro_batch

    def uniform(self) -> tuple[int, int]:
        """(d, t) of every stage (rule E3 holds; checked in :func:`prepare`)."""
        return self.stages[0].d, self.stages[0].t

    @property
    def world_size(self) -> int:
        d, t = self.uniform()
        return d * t * self.pipeline

    @property
    def context_parallel(self) -> int:
        """c of the workload's model record (1 without one)."""
        return self.model.context_parallel if self.model is not None else 1

    def tensor_parallel(self) -> int:
        """The tensor-parallel size: every stage's t / c (:class:`ExportError`, rule E3, when c does
        not divide it: such a plan is not from the workload's own degrees)."""
        c = self.context_parallel
        t = self.uniform()[1]
        if t % c:
            raise ExportError(f"stage degree t={t} is not a multiple of the workload's context-parallel size {c}",
                              rule="E3", target=self.target)
        return t // c


@dataclass(frozen=True)
class Export:
    """What an export writes: ``text`` (the main file's content: Megatron arguments, the
    DeepSpeed config JSON, the torchtitan TOML), ``extra_files`` (suffix -> content, e.g.
    DeepSpeed's pipeline partition), ``data`` (machine-readable, for ``--json``) and
    ``notes`` (what does not carry over exactly, one line each)."""

    target: str
    text: str
    data: Mapping[str, Any]
    notes: tuple[str, ...]
    extra_files: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, **dict(self.data), "notes": list(self.notes),
                "text": self.text, "extra_files": dict(self.extra_files)}


def format_counts(counts: list[int]) -> str:
    """Runs of equal numbers: [5, 6, 6, 6, 5] -> '5, 6 x 3, 5'."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        out.append(f"{counts[i]}" if j == i else f"{counts[i]} x {j - i + 1}")
        i = j + 1
    return ", ".join(out)


def _node_label(problem: Problem, v: int) -> str:
    return problem.node_by_id[v].label


def prepare(problem: Problem, plan: Plan, target: str, *, micro_batch: int | None = None,
            notes: tuple[str, ...] = ()) -> ExportPlan:
    """Check the plan against ``problem`` and the rules every target shares (E1, E2, E3, E4
    for unknown ids and recomputation outside transformer layers, E5, E7); raise
    :class:`ExportError` (or :class:`~piper.core.evaluate.PlanError` for a plan that breaks the
    structural rules 1-4) naming the stage and the rule.

    ``micro_batch``: sequences per Piper sample when the workload does not record it (a
    recorded value that differs is an error: nothing is silently replaced). ``notes``: lines
    to carry into the export (e.g. what ``--fit-recompute`` changed)."""
    if target not in TARGET_NAMES:
        raise ExportError(f"unknown export target {target!r} (known: {', '.join(TARGETS)})", rule="E4")
    chosen = check_plan(problem, plan)
    lm = map_layers(problem)
    pos = lm.position
    model = model_info(problem)
    out_notes: list[str] = list(notes)

    # E7: the micro-batch size
    if model is not None:
        if micro_batch is not None and micro_batch != model.micro_batch:
            raise refuse(target, "E7", f"--micro-batch {micro_batch} differs from the workload's recorded "
                         f"micro-batch of {model.micro_batch} sequences (its costs are for that size)")
        b = model.micro_batch
        if model.global_batch != problem.microbatches * b:
            out_notes.append(f"global batch {problem.microbatches * b} sequences (N = {problem.microbatches} micro-batches "
                         f"of {b}) differs from the {model.global_batch} the workload was built for (N was overridden)")
        try:
            check_record_graph(problem, model, lm)
        except ExportError as exc:
            raise refuse(target, exc.rule, str(exc)) from None
    elif micro_batch is not None:
        b = micro_batch
    else:
        raise refuse(target, "E7", "the workload does not record the micro-batch size (sequences per Piper "
                     "sample; workloads from `python -m piper model` do)", hint="give it with --micro-batch B")

    # E3: one (d, t)
    first = plan.stages[0]
    for i, s in enumerate(plan.stages[1:], start=2):
        if (s.d, s.t) != (first.d, first.t):
            raise refuse(target, "E3", f"stage {i} has (d, t) = ({s.d}, {s.t}) but stage 1 has ({first.d}, {first.t})",
                         stage=i, hint="re-plan with --uniform (solve / plan), which gives every stage one (d, t)")

    stages: list[StageSpec] = []
    last = len(plan.stages)
    empty: set[int] = set()  # stages Megatron-LM runs empty (their head-side nodes with the loss)
    for i, s in enumerate(plan.stages, start=1):
        layer_pos = sorted(pos[v] for v in s.nodes if v in pos)
        has_pre = any(v in lm.pre for v in s.nodes)
        has_post = any(v in lm.post for v in s.nodes)
        if target == "megatron" and i == last - 1 and all(v in lm.post for v in s.nodes):
            # a chunk of only head-side nodes (the final norm) before the last: Megatron-Core applies
            # them with the loss (L) and allows empty chunks ("E||t|L"), so this chunk runs empty
            time_s = sum(chosen[v].time_per_sample for v in s.nodes)
            names = ", ".join("node " + _node_label(problem, v) for v in s.nodes)
            out_notes.append(f"rule E2: stage {i} holds only {names}, which Megatron-LM applies with the loss in the "
                             f"last stage ({last}); stage {i} runs empty in the layout and its time per sample, "
                             f"{time_s:.6g}, moves to the last stage (the evaluator's figures keep it in stage {i})")
            empty.add(i)
            flags = []
            for v in s.nodes:
                meaning = tmpc_meaning(s.tmpcs[v])
                flags.append(bool(meaning and meaning[1]))
            stages.append(StageSpec(i, s.d, s.t, False, False, (), (), tuple(flags)))
            continue
        # E2: the embedding side in stage 1, the head side in the last stage
        for v in s.nodes:
            if v in lm.pre and i != 1:
                raise refuse(target, "E2", f"node {_node_label(problem, v)} comes before the first transformer layer "
                             f"but is in stage {i}, not stage 1", stage=i)
            if v in lm.post and i != last:
                raise refuse(target, "E2", f"node {_node_label(problem, v)} comes after the last transformer layer "
                             f"but is in stage {i}, not the last stage ({last})", stage=i)
        if layer_pos and layer_pos != list(range(layer_pos[0], layer_pos[0] + len(layer_pos))):
            raise refuse(target, "E1", f"stage {i} holds transformer layers {layer_pos}, not a consecutive run", stage=i)
        recompute: list[str] = []
        sp: list[bool] = []
        for v in sorted(s.nodes, key=lambda v: (pos.get(v, -1), v)):
            tid = s.tmpcs[v]
            meaning = tmpc_meaning(tid)
            if meaning is None:
                raise refuse(target, "E4", f"node {_node_label(problem, v)} in stage {i} uses TMPC {tid!r}, which has no "
                             f"known meaning (known ids: {_KNOWN_IDS})", stage=i)
            kind, seq_par = meaning
            if v in pos:
                recompute.append(kind)
            elif kind != "none":
                raise refuse(target, "E4", f"node {_node_label(problem, v)} in stage {i} is not a transformer layer but "
                             f"uses TMPC {tid!r} ({kind} recomputation); the targets recompute transformer layers only",
                             recompute=True, stage=i)
            sp.append(seq_par)
        stages.append(StageSpec(i, s.d, s.t, has_pre, has_post, tuple(layer_pos), tuple(recompute), tuple(sp)))
    ordered = [p for st in stages for p in st.layers]
    if ordered != list(range(len(lm.layers))):
        raise refuse(target, "E1", "the stages do not hold the transformer layers in chain order")
    for st in stages:
        if (not st.layers and not (st.index == 1 and st.pre) and not (st.index == last and st.post)
                and st.index not in empty):
            raise refuse(target, "E1", f"stage {st.index} holds no transformer layer", stage=st.index)

    # E5: one sequence-parallel switch (only meaningful at t > 1; the ids at t = 1 have no +sp)
    flags = {f for st in stages for f in st.sequence_parallel}
    if len(flags) > 1:
        on = next(st for st in stages if True in st.sequence_parallel)
        off = next(st for st in stages if False in st.sequence_parallel)
        where = f"stage {on.index}" if on.index == off.index else f"stages {on.index} (on) and {off.index} (off)"
        raise refuse(target, "E5", f"the plan mixes sequence parallelism on and off ({where}); the target has one switch "
                     "for the whole model", stage=off.index)

    sharded = any(c.memory_sharded > 0 for c in chosen.values()) or any(
        c.memory_sharded_expert > 0 for c in chosen.values())
    expert = _expert_layout(problem, plan, target, pos)
    score = evaluate(problem, plan)
    if score.oom:
        out_notes.append("the plan does not fit the workload's memory limit (the evaluator scores it out of memory)")
    if plan.devices_used < problem.devices:
        out_notes.append(f"the plan uses {plan.devices_used} of the cluster's {problem.devices} devices")
    return ExportPlan(target, tuple(stages), lm, model, problem.microbatches, b, sharded, problem.devices,
                      score.oom, tuple(out_notes), plan.schedule.virtual_stages, expert or (1, 1))


def _expert_layout(problem: Problem, plan: Plan, target: str, pos: Mapping[int, int]) -> tuple[int, int] | None:
    """(e, e_t) of the MoE layers (TMPCs with expert keys), None when the plan has none; rule E9
    when they differ."""
    seen: dict[tuple[int, int], int] = {}
    for i, s in enumerate(plan.stages, start=1):
        for v in s.nodes:
            c = problem.node_by_id[v].tmpc(s.t, s.tmpcs[v])
            if c is None or not c.has_expert_terms or v not in pos:
                continue
            seen.setdefault((c.expert_parallel, c.expert_tensor_parallel), i)
    if len(seen) > 1:
        (a, i), (b, j) = list(seen.items())[:2]
        raise refuse(target, "E9", f"stage {i} runs experts with (e, e_t) = {a}, stage {j} with {b}; the target has "
                     "one expert layout for the model", stage=j)
    return next(iter(seen), None)
