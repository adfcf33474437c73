"""Score the layout a user runs today (their Megatron-LM command line) with the one evaluator.

:func:`score_layout` builds the front end's workload for the layout's degree t and TMPC only,
the plan Megatron-LM runs (:func:`layout_plan`; with ``--cp c`` each layer runs on t x c devices,
the workload's degree key, docs/problem.md §11: layers split evenly over the p pipeline stages,
or the p v chunks of the interleaved schedule, the first stage also holding the embedding and
the last the final norm and output head) and scores it with :func:`piper.core.evaluate.evaluate`:
its ``batch_time`` is the predicted iteration time. The workload carries the optimizer step
(``stepTime`` / ``stepTimeSharded``) and, with ``--overlap-grad-reduce`` /
``--overlap-param-gather``, the resync's overlap (``resyncOverlapTime``, over the window of the
layout's schedule: :mod:`piper.frontend.overlap`): docs/problem.md §10.

Reported (units in the keys): iteration time; tokens/s in all and per GPU; model TFLOP/s per
GPU and MFU with Megatron-LM's FLOP count (6 x matrix-product parameters x tokens + the full
non-causal attention 12 l s^2 h per sequence, i.e. :func:`~piper.frontend.costs.model_flops_per_iteration`)
and with attention's causal half only (``mfu_causal``); MFU against the BF16 peak; memory per
GPU (the fullest stage) against the limit (the device's memory less the reserve); the bottleneck.

Mixture-of-experts models: ``Layout.ep`` / ``Layout.etp`` (``--ep`` / ``--etp``) pick the MoE
layers' TMPC (:func:`~piper.frontend.tmpc.expert_tmpc_id`), checked by :func:`check_expert_layout`
(e divides E, e_t in {1, t}, rule 6: e e_t divides d t); the model FLOPs count the active
parameters (:func:`~piper.frontend.costs.moe_layer_forward_flops`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from piper.core.errors import FrontendError
from piper.core.evaluate import Score, evaluate
from piper.core.pass_order import schedule_order_memory
from piper.core.plan import Plan, Schedule, Stage
from piper.core.problem import Problem
from piper.frontend import context, costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.metrics import memory_breakdown
from piper.frontend.moe_costs import expert_layouts, layer_costs, layer_variant
from piper.frontend.overlap import overlap_microbatches
from piper.frontend.tmpc import expert_tmpc_id, tmpc_id
from piper.frontend.workload import (
    TrainingSetup,
    build_workload,
    sequence_splits,
    tensor_parallel_degrees,
)

__all__ = ["Layout", "check_expert_layout", "check_layout", "even_split", "layout_plan", "megatron_split", "model_flops",
           "score_layout"]


@dataclass(frozen=True)
class Layout:
    """A Megatron-LM layout: degrees, schedule, recomputation and sequence parallelism.

    ``stage_layers`` (optional) gives the transformer layers of each pipeline stage (p entries)
    or of each chunk (p v entries, interleaved), e.g. Llama 3's 7, 8 x 14, 7; default: even."""

    tp: int
    pp: int
    dp: int
    recompute: str = "selective"
    sequence_parallel: bool = False
    vp: int = 1
    stage_layers: tuple[int, ...] | None = None
    #: context-parallel size (``--context-parallel-size``): each layer runs on tp x cp devices
    cp: int = 1
    #: expert-parallel size e (``--expert-model-parallel-size``; MoE models only)
    ep: int = 1
    #: expert-tensor-parallel size e_t (``--expert-tensor-parallel-size``; MoE models only)
    etp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def width(self) -> int:
        """The model-parallel width t = tp x cp, the workload's degree key (docs/problem.md §11)."""
        return self.tp * self.cp

    @property
    def tmpc(self) -> str:
        """The transformer layers' TMPC id (sequence parallelism only when t > 1, as in Megatron)."""
        return tmpc_id(self.recompute, self.sequence_parallel and self.tp > 1)

    @property
    def expert_tmpc(self) -> str:
        """The MoE layers' TMPC id (:func:`~piper.frontend.tmpc.expert_tmpc_id`)."""
        return expert_tmpc_id(self.recompute, self.sequence_parallel and self.tp > 1, self.ep, self.etp)


def check_expert_layout(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, layout: Layout) -> None:
    """``--ep`` / ``--etp`` against the model and the layout (docs/problem.md §11, rule 6): a
    :class:`FrontendError` naming the flag."""
    for name, value in (("--ep", layout.ep), ("--etp", layout.etp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FrontendError(f"{name} must be a whole number >= 1, got {value!r}")
    if cfg.moe is None:
        if layout.ep > 1 or layout.etp > 1:
            raise FrontendError(f"--ep {layout.ep} / --etp {layout.etp}: {cfg.name} is not a mixture-of-experts model")
        return
    if cfg.moe.experts % layout.ep:
        raise FrontendError(f"--ep {layout.ep} must divide the {cfg.moe.experts} experts of {cfg.name}")
    if layout.etp not in (1, layout.tp):
        raise FrontendError(f"--etp {layout.etp}: the front end offers 1 or --tp ({layout.tp})")
    if layout.etp > 1 and cfg.linear_bias:
        raise FrontendError(f"--etp {layout.etp}: {cfg.name}'s linear layers have biases, and Megatron-Core runs "
                            "biased experts only at --etp 1 (TransformerConfig: 'Bias in MoE is only supported when "
                            "ETP==1')")
    if setup.token_dispatcher == "flex" and layout.ep * layout.etp == 1:
        raise FrontendError("--token-dispatcher flex needs --ep > 1 (Megatron-Core's flex dispatcher asserts "
                            "TPxEP > 1 over the experts' tensor- and expert-parallel sizes)")
    width = layout.ep * layout.etp
    if (layout.dp * layout.width) % width:
        cp = f" x --cp {layout.cp}" if layout.cp > 1 else ""
        raise FrontendError(f"--ep {layout.ep} x --etp {layout.etp} = {width} must divide --dp {layout.dp} x --tp "
                            f"{layout.tp}{cp} = {layout.dp * layout.width} (rule 6: the experts of a stage's devices; "
                            "Megatron-Core lays expert parallelism over the data-, context- and tensor-parallel ranks)")
    if (layout.ep, layout.etp) not in expert_layouts(cfg, layout.tp, setup.nodes * hw.devices_per_node, True):
        raise FrontendError(f"--ep {layout.ep}: the front end offers powers of two dividing the experts, up to 64 "
                            f"and the GPUs")
    if layout.tp > 1 and not layout.sequence_parallel:
        raise FrontendError(f"--tp {layout.tp} with a mixture-of-experts model needs --sequence-parallel "
                            "(Megatron-Core's rule)")


def even_split(layers: int, parts: int) -> list[int]:
    """Megatron-LM's rule: ``layers`` split evenly into ``parts`` (an error when it does not divide)."""
    if layers % parts:
        raise FrontendError(f"{layers} layers do not split evenly into {parts} pipeline chunks")
    return [layers // parts] * parts


def megatron_split(layers: int, pp: int, vp: int = 1, embedding: bool = False, loss: bool = False) -> tuple[int, ...]:
    """Megatron-Core's even split with ``--account-for-embedding-in-pipeline-split`` (``embedding``)
    and ``--account-for-loss-in-pipeline-split`` (``loss``): the embedding and the loss each count
    as one layer, the l (+ 1) (+ 1) layers split evenly into the p v chunks, and the first (last)
    chunk holds one transformer layer fewer (Megatron-Core adds one layer per flag before dividing;
    docs/results/validation.md, "Llama 3 with v = 8"). With neither flag this is
    :func:`even_split`. Llama 3 405B's 126 layers on 16 stages: (7, 8 x 14, 7); with v = 8 the first
    chunk holds only the embedding and the last only the output layer, as [L3] Section 3.3.2
    describes its layout. A :class:`FrontendError` naming the flags when the count does not divide.
    """
    chunks = pp * vp
    total = layers + int(embedding) + int(loss)
    if total % chunks or total // chunks < 1:
        flags = [f for f, on in (("--account-for-embedding-in-pipeline-split", embedding),
                                 ("--account-for-loss-in-pipeline-split", loss)) if on]
        counted = f"{layers} layers" + "".join(f" + 1 ({f})" for f in flags)
        raise FrontendError(f"{counted} do not split evenly into {chunks} pipeline chunks (--pp {pp}"
                            + (f" x --vp {vp}" if vp > 1 else "") + ")")
    each = total // chunks
    sizes = [each] * chunks
    sizes[0] -= int(embedding)
    sizes[-1] -= int(loss)
    return tuple(sizes)


def check_layout(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, layout: Layout) -> list[int]:
    """The layers of each stage (or chunk); a :class:`FrontendError` naming the flag when the
    layout is impossible."""
    gpus = setup.nodes * hw.devices_per_node
    for name, value in (("--tp", layout.tp), ("--cp", layout.cp), ("--pp", layout.pp), ("--dp", layout.dp),
                        ("--vp", layout.vp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FrontendError(f"{name} must be a whole number >= 1, got {value!r}")
    if layout.gpus != gpus:
        cp = f" x --cp {layout.cp}" if layout.cp > 1 else ""
        raise FrontendError(f"--tp {layout.tp}{cp} x --pp {layout.pp} x --dp {layout.dp} = {layout.gpus} GPUs, but "
                            f"--nodes {setup.nodes} x {hw.devices_per_node} = {gpus}")
    if layout.tp not in tensor_parallel_degrees(cfg, hw):
        raise FrontendError(f"--tp {layout.tp}: must divide the attention heads ({cfg.attention_heads}), the key/value "
                            f"heads ({cfg.split_kv_heads}), the FFN width ({cfg.ffn_hidden_size}) and the GPUs per node "
                            f"({hw.devices_per_node})")
    local_tokens = cfg.seq_length // layout.cp
    if (layout.sequence_parallel and layout.tp > 1 and cfg.seq_length % layout.cp == 0
            and not sequence_splits(cfg, layout.cp, layout.tp)):
        # Megatron's scatter to the sequence-parallel region splits the tokens evenly over the group
        raise FrontendError(f"--sequence-parallel: the {local_tokens} tokens of a sequence"
                            + (f" per context-parallel rank (--seq {cfg.seq_length} / --cp {layout.cp})" if layout.cp > 1
                               else f" (--seq {cfg.seq_length})")
                            + f" do not split evenly over --tp {layout.tp}")
    check_expert_layout(cfg, hw, setup, layout)
    if layout.vp > 1 and layout.pp < 2:
        raise FrontendError(f"--vp {layout.vp}: the interleaved schedule needs --pp >= 2")
    chunks = layout.pp * layout.vp
    if layout.stage_layers is not None:
        sizes = list(layout.stage_layers)
        # the first chunk holds the embedding and the last the output layer: they may hold no
        # transformer layer (Megatron's --account-for-{embedding,loss}-in-pipeline-split)
        inner_ok = chunks < 3 or min(sizes[1:-1]) >= 1
        if (len(sizes) != chunks or sum(sizes) != cfg.layers or min(sizes) < 0 or not inner_ok
                or (chunks == 1 and sizes[0] < 1)):
            raise FrontendError(f"stage layers {sizes}: need {chunks} counts summing to {cfg.layers} layers, "
                                "each at least 1 but the first and the last, which may be 0")
    else:
        if cfg.layers % chunks:
            raise FrontendError(f"--pp {layout.pp}" + (f" x --vp {layout.vp}" if layout.vp > 1 else "")
                                + f": {cfg.layers} layers do not split evenly into {chunks} "
                                + ("chunks" if layout.vp > 1 else "stages"))
        sizes = even_split(cfg.layers, chunks)
    per_replica = setup.global_batch / (cfg.micro_batch * layout.dp)
    if not float(per_replica).is_integer():
        raise FrontendError(f"--global-batch {setup.global_batch} is not a multiple of --micro-batch "
                            f"{cfg.micro_batch} x --dp {layout.dp}")
    if layout.vp > 1 and int(per_replica) % layout.pp:
        raise FrontendError(f"--vp {layout.vp}: the micro-batches per replica ({int(per_replica)}) must be a "
                            f"multiple of --pp {layout.pp} (Megatron-LM's interleaved schedule)")
    if per_replica < layout.pp:
        raise FrontendError(f"--pp {layout.pp}: the micro-batches per replica (--global-batch {setup.global_batch} / "
                            f"(--micro-batch {cfg.micro_batch} x --dp {layout.dp}) = {int(per_replica)}) must be at "
                            f"least the stages: the spec's rule 4 (docs/problem.md) has each stage replica work on "
                            "its own micro-batches; Megatron-LM would run the layout with a longer bubble")
    return sizes


def layout_plan(problem: Problem, sizes: list[int], layout: Layout) -> Plan:
    """The plan Megatron runs: chunk j holds ``sizes[j]`` transformer layers in order, the
    embedding sits in the first chunk, the final norm and output head in the last; every
    transformer layer uses the layout's TMPC, every other node ``none`` (``none+sp``)."""
    kinds = {nd.id: nd.kind for nd in problem.nodes}
    layer_ids = sorted(v for v, k in kinds.items() if k == "transformer")
    first = [v for v, k in kinds.items() if k == "embedding"]
    last = sorted(v for v, k in kinds.items() if k in ("final_norm", "output_head"))
    other = tmpc_id("none", layout.sequence_parallel and layout.tp > 1)
    stages, at = [], 0
    for i, n in enumerate(sizes):
        nodes = layer_ids[at:at + n]
        at += n
        if i == 0:
            nodes = first + nodes
        if i == len(sizes) - 1:
            nodes = nodes + last
        tm = {v: (_layer_tmpc(problem, v, layout) if kinds[v] == "transformer" else other) for v in nodes}
        stages.append(Stage(tuple(nodes), layout.dp, layout.width, tm))
    schedule = Schedule("interleaved", layout.vp) if layout.vp > 1 else Schedule()
    return Plan(tuple(stages), schedule)


def _layer_tmpc(problem: Problem, node: int, layout: Layout) -> str:
    """The TMPC a transformer layer runs: the expert layout's id on an MoE layer, else the layout's."""
    ids = {c.id for c in problem.nodes[node].tmpcs.get(layout.width, [])}
    return layout.expert_tmpc if layout.expert_tmpc in ids else layout.tmpc


def _layer_cost(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, layout: Layout, layer: int) -> Any:
    """The front end's cost record of transformer layer ``layer`` under the layout."""
    from piper.frontend.workload import model_parallel_node_costs

    variant = layer_variant(cfg, "transformer", layer)
    window = cfg.attention_window(layer)
    if variant is None:
        return next(c for c in model_parallel_node_costs(cfg, hw, setup, "transformer", layout.width, window)
                    if c.tmpc_id == layout.tmpc)
    want = layout.expert_tmpc if variant == "moe" else layout.tmpc
    return next(c for c in layer_costs(cfg, hw, setup, layout.tp, variant, setup.nodes * hw.devices_per_node, window)
                if c.tmpc_id == want)


def model_flops(cfg: TransformerConfig, global_batch: int, causal: bool = False) -> float:
    """Model FLOPs of one iteration (no recomputation): Megatron-LM's count with the full
    attention (``causal=False``), or with the causal half of the attention products."""
    full = costs.model_flops_per_iteration(cfg, global_batch)
    if not causal:
        return full
    return full - global_batch * cfg.layers * 3 * costs.attention_core_forward_flops(cfg) / 2


def _bottleneck(score: Score, problem: Problem, comm_share: float) -> dict[str, Any]:
    """What bounds the iteration: per-sample terms of the slowest stage, and the pipeline's fill and drain."""
    i = score.bottleneck
    st = score.stages[i]
    n = problem.microbatches
    parts = {
        "compute": st.compute * n * (1 - comm_share),
        "tensor_parallel_communication": st.compute * n * comm_share,
        "pipeline_communication": st.edge * n,
        "data_parallel_resync": st.resync * n,
        "optimizer_step": st.step * n,
        "pipeline_bubble": max(0.0, score.batch_time - n * score.tps),
    }
    return {"stage": i + 1, "largest": max(parts, key=parts.__getitem__), "seconds": parts}


def score_layout(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, layout: Layout) -> dict[str, Any]:
    """Score ``layout`` (module docstring). Returns the metrics (units in the keys) plus
    ``problem``, ``plan``, ``score`` (objects, not JSON) and ``workload`` (the JSON object built)."""
    sizes = check_layout(cfg, hw, setup, layout)
    from piper.io.workload import load_problem

    setup = replace(setup, optimizer_step=True, context_parallel=layout.cp,
                    resync_overlap_microbatches=overlap_microbatches(
                        layout.pp, layout.vp, setup.global_batch // (cfg.micro_batch * layout.dp)),
                    expert_tensor_parallel=layout.etp > 1, expert_parallel=layout.ep if cfg.moe is not None else None)
    recompute = (layout.recompute,)
    workload = build_workload(cfg, hw, setup, degrees=(layout.width,), recompute=recompute)
    problem = load_problem(workload, strict=True)
    plan = layout_plan(problem, sizes, layout)
    score = evaluate(problem, plan)
    gpus = layout.gpus
    tokens = setup.global_batch * cfg.seq_length
    ok = not score.oom and math.isfinite(score.batch_time) and score.batch_time > 0
    bt = score.batch_time if ok else math.inf
    flops = model_flops(cfg, setup.global_batch)
    flops_causal = model_flops(cfg, setup.global_batch, causal=True)
    # the share of the transformer layers' time that is exposed tensor-parallel communication
    # (the last layer: an MoE layer in every MoE preset)
    layer = [nd for nd in problem.nodes if nd.kind == "transformer"][-1]
    tm = layer.tmpc(layout.width, _layer_tmpc(problem, layer.id, layout))
    cost = _layer_cost(cfg, hw, setup, layout, cfg.layers - 1)
    comm_share = cost.communication_s / cost.time_per_sample_s if cost.time_per_sample_s > 0 else 0.0
    peak = hw.peak_flops
    max_mem = max(s.memory for s in score.stages)
    return {
        "model": cfg.name, "gpu": hw.name, "gpus": gpus, "tp": layout.tp, "cp": layout.cp, "pp": layout.pp, "dp": layout.dp,
        "vp": layout.vp, "micro_batch": cfg.micro_batch, "global_batch": setup.global_batch,
        "seq_length": cfg.seq_length, "recompute": layout.recompute,
        "recompute_modules": list(setup.recompute_modules) if layout.recompute == "selective" else None,
        "sequence_parallel": layout.sequence_parallel and layout.tp > 1, "precision": cfg.precision,
        "tmpc": layout.tmpc, "stage_layers": sizes,
        "microbatches_per_replica": setup.global_batch // (cfg.micro_batch * layout.dp),
        "batch_time_s": bt if ok else None,
        "tokens_per_s": tokens / bt if ok else None,
        "tokens_per_s_per_gpu": tokens / bt / gpus if ok else None,
        "model_flops_per_iteration": flops,
        "model_tflops_per_gpu": flops / bt / gpus / 1e12 if ok else None,
        "mfu": flops / bt / (gpus * peak) if ok else None,
        "mfu_causal": flops_causal / bt / (gpus * peak) if ok else None,
        "flop_count": "Megatron-LM: 6 x matmul params x tokens + full (non-causal) attention; mfu_causal halves attention"
                      + ("; MoE layers: the ACTIVE parameters (router + k routed experts + shared experts)"
                         if cfg.moe is not None else ""),
        "ep": layout.ep, "etp": layout.etp,
        # each layer's context-parallel scheme, "p2p", "a2a", "allgather" or "a2a+p2p" (piper/frontend/context.py);
        # None at c = 1
        "cp_comm_types": context.layer_comm_types(cfg, setup.cp_comm_type) if layout.cp > 1 else None,
        # a2a+p2p's (C1, C2): all-to-all groups of C1 devices, a ring of C2 across them; else None
        "hierarchical_context_parallel_sizes": [setup.cp_a2a_size, layout.cp // setup.cp_a2a_size]
        if layout.cp > 1 and setup.cp_comm_type == "a2a+p2p" and setup.cp_a2a_size else None,
        "max_memory_bytes": max_mem,
        # what fills the fullest stage's devices (piper.core.evaluate.memory_terms)
        "memory_breakdown": memory_breakdown(problem, plan, score),
        # a diagnostic: the activations counted by the schedule's pass order (docs/problem.md §9.2's limit)
        "schedule_order_memory_bytes": max(schedule_order_memory(problem, plan, score)),
        "memory_limit_bytes": problem.memory_per_device,
        "memory_reserve_bytes": setup.reserve_bytes(hw),
        "fits": not score.oom,
        "layer_time_per_microbatch_s": tm.time_per_sample if tm is not None else None,
        "layer_tp_communication_s": cost.communication_s,
        "bottleneck": _bottleneck(score, problem, comm_share) if ok else {"stage": (score.bottleneck or 0) + 1,
                                                                           "largest": "memory"},
        "problem": problem, "plan": plan, "score": score, "workload": workload,
    }
