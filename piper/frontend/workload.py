"""Build Piper's workload (docs/problem.md §2, version 2) from a model, hardware and a training setup.

The graph is a chain: ``embedding`` (node 0) -> one ``transformer`` node per
layer (nodes 1..l) -> ``final_norm`` (node l + 1) -> ``output_head``
(node l + 2). Every node carries ``kind`` and ``layerIndex``: the 0-based
layer index for transformer nodes; the embedding carries 0 and the final
norm and output head carry l - 1 (the transformer layer they sit next to).
Transformer nodes are named ``ParallelTransformerLayer`` like BERT's in
the paper's workloads, so tools that look for that name (the ``equi``
baseline) find them.

**One Piper sample is one micro-batch of b sequences.** Piper's N
(``mbsInBatch``) is the number of micro-batches per batch, global batch / b;
``timePerSample`` is the time of one micro-batch (seconds),
``memoryUsageA`` its activations, edge ``communicationCost`` its activation
bytes. Times are seconds, sizes bytes, bandwidths bytes/s.

Per node and tensor-parallel degree t (see :func:`tensor_parallel_degrees`)
and TMPC (ids in :mod:`piper.frontend.tmpc`):

* ``timePerSample`` = b x FLOPs / (t x peak x efficiency) + tensor-parallel
  communication time: n all-reduces of the p*b*s*h activation, each
  2(t - 1)/t x bytes per device at the NVLink bandwidth (layers: n = 4, 6
  with full recomputation, [SC21] Section 3.2; embedding and head: n = 1).
  Communication is not overlapped with compute.
* ``memoryUsageA``: activation bytes per micro-batch in flight ([K22] Table 2).
* ``parameterSize`` = g x (parameters per device), g = bytes per gradient
  element (2 by default), what the data-parallel gradient resync moves.
* ``memoryUsageB`` = (p + g) x parameters per device (weights, gradients);
  ``memoryUsageShardedB`` = 12 x parameters per device (fp32 master weights
  and Adam's two moments, [ZeRO] K = 12) with the distributed optimizer,
  otherwise those 12 bytes go into ``memoryUsageB`` and the sharded key is 0.
* ``syncTimeFw`` / ``syncTimeBw`` are 0: the activation crossing a stage
  boundary is the same with or without sequence parallelism in this model
  (Megatron's scatter/gather optimisation, [SC21] Section 4.1, is not modelled).

With tied embeddings the output head holds its own copy of the embedding
matrix (Megatron-LM does this when the two are on different pipeline
stages); a one-stage plan therefore counts that matrix twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from piper.core.errors import FrontendError
from piper.core.limits import MIN_FRACTION
from piper.core.problem import RESYNC_OVERLAP_WINDOWS, WINDOW_MICROBATCH
from piper.frontend import context, costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.moe_costs import layer_costs, layer_tmpc_ops, layer_variant
from piper.frontend.node_cost import NodeCost
from piper.frontend.operations import (
    Kernels,
    node_ops,
    ops_time_s,
    optimizer_step_time_s,
)
from piper.frontend.moe import moe_layer_count
from piper.frontend.recompute import DEFAULT_RECOMPUTE_MODULES, check_modules_for_model, check_recompute_modules
from piper.frontend.tmpc import parse_tmpc_id, tmpc_ids

__all__ = [
    "DEFAULT_MEMORY_RESERVE_FRACTION",
    "TOKEN_DISPATCHERS",
    "NodeCost",
    "TrainingSetup",
    "all_reduce_factor",
    "build_workload",
    "check_recompute_modules_for",
    "effective_hardware",
    "model_parallel_node_costs",
    "model_record",
    "node_costs",
    "node_params_per_device",
    "offered_degrees",
    "p2p_bytes_per_device",
    "resync_bandwidths",
    "resync_overlap_s",
    "sequence_splits",
    "tensor_parallel_degrees",
    "workload_nodes",
]

KINDS = ("embedding", "transformer", "final_norm", "output_head")
NODE_NAMES = {
    "embedding": "Embedding",
    "transformer": "ParallelTransformerLayer",
    "final_norm": "FinalNorm",
    "output_head": "OutputHead",
}


#: the memory kept back per device by default, as a fraction of its capacity: the CUDA context
#: and library workspaces (cuBLAS, Transformer Engine: about 0.5-1 GB), NCCL's buffers for the
#: tensor-, pipeline- and data-parallel communicators (NCCL_BUFFSIZE 4 MiB per channel and peer:
#: a few hundred MB each) and the caching allocator's fragmentation (reserved - allocated, a few
#: percent of what a Megatron-LM run allocates). 7.5% is 6.4 GB of an 80 GiB device.
DEFAULT_MEMORY_RESERVE_FRACTION = 0.075
#: Transformer Engine's default FP8 recipe keeps an amax history of 1,024 steps
#: (``DelayedScaling(amax_history_len=1024)``), fp32, for the input, weight and gradient of each product
FP8_AMAX_HISTORY = 1024


#: MoE token dispatchers (``TrainingSetup.token_dispatcher``; piper/frontend/moe_costs.py)
TOKEN_DISPATCHERS = ("alltoall", "flex")


@dataclass(frozen=True)
class TrainingSetup:
    """How the model is trained, beyond the model and the hardware. The defaults are
    Megatron-LM's (``megatron/training/arguments.py``) where it has one."""

    #: number of nodes (servers) of ``Hardware.devices_per_node`` devices
    nodes: int = 1
    #: sequences per iteration (the global batch)
    global_batch: int = 2048
    #: e_max override: the fraction of peak a large matrix product reaches (None: the hardware's
    #: ``gemm_efficiency``)
    efficiency: float | None = None
    #: shard fp32 master weights and Adam state over data-parallel replicas (ZeRO-1, ``--use-distributed-optimizer``)
    distributed_optimizer: bool = True
    #: bytes per gradient element: 4 (Megatron-LM accumulates and reduces BF16 gradients in fp32:
    #: ``accumulate_allreduce_grads_in_fp32`` is forced for ``--bf16``) or 2 (FP16, ``--grad-reduce-in-bf16``)
    grad_bytes: int = 4
    #: bytes per device kept back from the planner (None: :data:`DEFAULT_MEMORY_RESERVE_FRACTION` of the memory)
    memory_reserve_bytes: float | None = None
    #: recomputation assumed for the reported hardware FLOPs (the workload offers all kinds)
    recompute: str = "full"
    #: what the TMPC ``selective`` recomputes: Megatron-Core's ``--recompute-modules`` (default
    #: ``core_attn``; piper/frontend/recompute.py), a tuple of its module names
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    #: fused (flash) attention (Transformer Engine's default in Megatron-Core; SC'21 had none)
    flash_attention: bool = True
    #: ``--tp-comm-overlap``: sequence-parallel collectives overlapped with their products
    tp_comm_overlap: bool = False
    #: ``--overlap-grad-reduce``: the gradient reduce-scatter (all-reduce) runs during the last
    #: micro-batch's backward pass (workload key ``resyncOverlapTime``)
    overlap_grad_reduce: bool = False
    #: ``--overlap-param-gather``: the weight all-gather runs during the first micro-batch's forward pass
    overlap_param_gather: bool = False
    #: the micro-batches of a stage's backward (forward) passes the gradient reduce (weight gather) can
    #: hide behind: 1 for 1F1B, more for the interleaved schedule (:mod:`piper.frontend.overlap`)
    resync_overlap_microbatches: float = 1.0
    #: the workload's ``resyncOverlapWindow`` (docs/problem.md §10.1) when it overlaps the resync:
    #: "microbatch" (h hides once per stage: ``resync_overlap_microbatches`` fixes the window) or
    #: "schedule" (each interleaved plan's groups hide their h times their own schedule's window;
    #: with ``resync_overlap_microbatches`` 1, the pricing ``score`` gives each plan: the planner's search)
    resync_overlap_window: str = "microbatch"
    #: each tensor-parallel rank sends only its 1/t of a stage's output ([SC21] Section 4.1's
    #: scatter/gather; Megatron-Core does this only with sequence parallelism)
    pipeline_scatter_gather: bool = False
    #: shard the gradients too (ZeRO stage 2; FSDP without resharding the weights): each device
    #: keeps 1/d of the gradient buffer (``memoryUsageShardedB``)
    shard_gradients: bool = False
    #: write the optimizer step's time (workload keys ``stepTime`` / ``stepTimeSharded``,
    #: docs/problem.md §10: solvers without them refuse such a workload; ``plan`` asks for them when
    #: its solver honours them, piper/frontend/planner.py)
    optimizer_step: bool = False
    #: c, the context-parallel size (``--context-parallel-size``): the workload's degree keys are
    #: t_tensor x c (docs/problem.md §11, :mod:`piper.frontend.context`)
    context_parallel: int = 1
    #: Megatron-Core's ``--cp-comm-type`` for c > 1: "p2p" (ring attention), "a2a" (all-to-all),
    #: "allgather" (Llama 3's all-gather of K, V) or "a2a+p2p" (both, ``cp_a2a_size``) on every layer; None: "a2a" on sliding-window layers
    #: and "p2p" elsewhere (:mod:`piper.frontend.context`)
    cp_comm_type: str | None = None
    #: c1 of ``cp_comm_type`` "a2a+p2p": the all-to-all groups' size (Megatron's
    #: ``--hierarchical-context-parallel-sizes c1 c2``, c2 = c / c1); None otherwise
    cp_a2a_size: int | None = None
    #: MoE layers also get the layouts with each expert split over e_t = t devices (Megatron's
    #: ``--expert-tensor-parallel-size t``); off by default: e_t = 1 (the Megatron-Bridge MoE recipes'
    #: and DeepSeek-V3's choice) keeps the TMPC count, and the DP's time, down (piper/frontend/moe_costs.py)
    expert_tensor_parallel: bool = False
    #: MoE layers get only the layouts of this expert-parallel size e (None: every e); the planner
    #: builds one workload per e, so that a plan has one expert layout, as the frameworks run
    expert_parallel: int | None = None
    #: Megatron-Core's ``--moe-token-dispatcher-type``: "alltoall" (NCCL all-to-all, k copies of each
    #: token) or "flex" (DeepEP / HybridEP: one copy per destination device and node; e_t = 1 only)
    token_dispatcher: str = "alltoall"
    #: the TMPCs offered at t > 1: None both (each layer chooses), True only with sequence
    #: parallelism (``+sp``), False only without. Megatron-LM, torchtitan and DeepSpeed have one switch
    #: for the whole model (docs/export.md, rule E5), so ``python -m piper plan`` fixes it (True by
    #: default): a plan then has one setting, as they run (docs/frontend.md, "What the frameworks can run")
    sequence_parallel: bool | None = None

    def __post_init__(self) -> None:
        for name in ("nodes", "global_batch", "grad_bytes", "context_parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FrontendError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.grad_bytes not in (2, 4):
            raise FrontendError(f"grad_bytes must be 2 (bf16 / fp16 gradients) or 4 (fp32), got {self.grad_bytes!r}")
        if self.efficiency is not None and not MIN_FRACTION <= self.efficiency <= 1:
            raise FrontendError(f"efficiency must be in [{MIN_FRACTION:g}, 1], got {self.efficiency!r}")
        if self.memory_reserve_bytes is not None and self.memory_reserve_bytes < 0:
            raise FrontendError(f"memory reserve must be >= 0 bytes, got {self.memory_reserve_bytes!r}")
        if self.expert_parallel is not None and (isinstance(self.expert_parallel, bool)
                                                 or not isinstance(self.expert_parallel, int) or self.expert_parallel < 1):
            raise FrontendError(f"expert_parallel must be a whole number >= 1 or None, got {self.expert_parallel!r}")
        if self.cp_comm_type is not None and self.cp_comm_type not in context.CP_COMM_TYPES:
            raise FrontendError(f"cp_comm_type must be one of {', '.join(context.CP_COMM_TYPES)} or None, "
                                f"got {self.cp_comm_type!r}")
        if self.cp_a2a_size is not None and (isinstance(self.cp_a2a_size, bool) or not isinstance(self.cp_a2a_size, int)
                                             or self.cp_a2a_size < 2):
            raise FrontendError(f"cp_a2a_size must be a whole number >= 2 or None, got {self.cp_a2a_size!r}")
        if self.token_dispatcher not in TOKEN_DISPATCHERS:
            raise FrontendError(f"token_dispatcher must be one of {', '.join(TOKEN_DISPATCHERS)}, "
                                f"got {self.token_dispatcher!r}")
        if self.token_dispatcher == "flex" and self.expert_tensor_parallel:
            raise FrontendError("token_dispatcher flex needs expert_tensor_parallel off (e_t = 1)")
        if self.recompute not in costs.RECOMPUTE_KINDS:
            raise FrontendError(f"recompute must be one of {', '.join(costs.RECOMPUTE_KINDS)}, got {self.recompute!r}")
        # the canonical order, so that equal settings are equal setups
        object.__setattr__(self, "recompute_modules", check_recompute_modules(self.recompute_modules))
        if self.resync_overlap_window not in RESYNC_OVERLAP_WINDOWS:
            raise FrontendError(f"resync_overlap_window must be one of {', '.join(RESYNC_OVERLAP_WINDOWS)}, "
                                f"got {self.resync_overlap_window!r}")
        for name in ("overlap_param_gather", "shard_gradients"):
            if getattr(self, name) and not self.distributed_optimizer:
                raise FrontendError(f"{name} needs distributed_optimizer (Megatron-LM: --overlap-param-gather needs "
                                    "--use-distributed-optimizer; sharded gradients are the distributed optimizer's)")
        if self.sequence_parallel not in (None, True, False):
            raise FrontendError(f"sequence_parallel must be true, false or null, got {self.sequence_parallel!r}")

    def offered(self, ids: list[str], t: int) -> list[str]:
        """The TMPC ids of ``ids`` this setup offers at degree t (``sequence_parallel``; t = 1 has no
        sequence parallelism: every id stays)."""
        if self.sequence_parallel is None or t == 1:
            return ids
        return [i for i in ids if parse_tmpc_id(i)[1] == self.sequence_parallel]

    def reserve_bytes(self, hw: Hardware) -> float:
        """The memory kept back per device, bytes."""
        if self.memory_reserve_bytes is None:
            return DEFAULT_MEMORY_RESERVE_FRACTION * hw.memory_bytes
        return float(self.memory_reserve_bytes)

    def kernels(self) -> Kernels:
        return Kernels(flash_attention=self.flash_attention, tp_comm_overlap=self.tp_comm_overlap)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tensor_parallel_degrees(cfg: TransformerConfig, hw: Hardware) -> list[int]:
    """Degrees t Megatron-LM accepts within one node: t divides the attention
    heads, the key/value heads (Megatron-core requires num_query_groups % t == 0;
    it does not replicate KV heads), the FFN width, and the devices per node (so
    a tensor-parallel group never spans two nodes). Only t up to the heads are tried (a node of
    2^31 - 1 devices took minutes). With MLA every head has its own decompressed key and value, so
    the key/value heads are the heads (as for the all-to-all's split, :mod:`piper.frontend.context`)."""
    return [
        t
        for t in range(1, min(hw.devices_per_node, cfg.attention_heads) + 1)
        if hw.devices_per_node % t == 0
        and cfg.attention_heads % t == 0
        and cfg.split_kv_heads % t == 0
        and cfg.ffn_hidden_size % t == 0
    ]


def all_reduce_factor(cfg: TransformerConfig, setup: TrainingSetup) -> float:
    """Piper's f in R = f (d - 1) w / (d N), w = gradient bytes per device.

    A ring all-reduce sends 2(d - 1)/d bytes per gradient byte: f = 2. With the
    distributed optimizer gradients are reduce-scattered (g bytes/param) and the
    updated p-byte weights all-gathered, each (d - 1)/d: f = (g + p)/g (= 2 for bf16 both).
    """
    if setup.distributed_optimizer:
        return (setup.grad_bytes + cfg.precision_bytes) / setup.grad_bytes
    return 2.0


def effective_hardware(hw: Hardware, setup: TrainingSetup) -> Hardware:
    """``hw`` with the setup's e_max override applied."""
    return hw if setup.efficiency is None else hw.with_changes(gemm_efficiency=setup.efficiency)


def node_params_per_device(cfg: TransformerConfig, kind: str, t: int) -> float:
    """Parameters of a node held by each of t tensor-parallel devices."""
    h = cfg.hidden_size
    if kind == "transformer":
        return costs.layer_params(cfg).per_device(t)
    if kind == "embedding":
        return cfg.vocab_size * h / t + (cfg.seq_length * h if cfg.learned_positions else 0)
    if kind == "final_norm":
        return float(costs.final_norm_params(cfg))
    return cfg.vocab_size * h / t


def p2p_bytes_per_device(cfg: TransformerConfig, setup: TrainingSetup, t: int, sp: bool) -> float:
    """Bytes each device of a stage sends (or receives) per pipeline transfer: the p b s h
    activation, split t ways with sequence parallelism or [SC21]'s scatter/gather."""
    whole = cfg.precision_bytes * cfg.micro_batch * cfg.seq_length * cfg.hidden_size
    return whole / t if ((sp and t > 1) or setup.pipeline_scatter_gather) else whole


def node_costs(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, kind: str, t: int,
               window: int | None = None) -> list[NodeCost]:
    """The TMPCs of a node of ``kind`` at degree t, in the order written to the workload (``window``:
    a transformer layer's sliding attention window, tokens)."""
    if kind not in KINDS:
        raise FrontendError(f"unknown node kind {kind!r}")
    hw = effective_hardware(hw, setup)
    p = cfg.precision_bytes
    kernels = setup.kernels()
    ids = setup.offered(tmpc_ids(t) if kind == "transformer" else tmpc_ids(t, ("none",)), t)
    params = node_params_per_device(cfg, kind, t)
    fp8_extra = 0.0
    if kind == "transformer" and cfg.precision == "fp8":
        # the FP8 copy of every product weight and its transpose (1 + 1 byte) plus the amax history
        fp8_extra = 2.0 * costs.layer_params(cfg).matmul / t + 4 * 3 * 4 * FP8_AMAX_HISTORY * 4
    out = []
    for tid in ids:
        recompute, sp = parse_tmpc_id(tid)
        ops = node_ops(kind, cfg, hw, t, recompute, sp, kernels, window, setup.recompute_modules)
        if kind == "transformer":
            act = costs.layer_activation_bytes(cfg, t, recompute, sp, setup.flash_attention, setup.recompute_modules)
        elif kind == "embedding":
            act = costs.embedding_activation_bytes(cfg, t, sp)
        elif kind == "final_norm":
            act = costs.final_norm_activation_bytes(cfg, t, sp)
        else:
            act = costs.head_activation_bytes(cfg, t, sp)
        comm = ops_time_s(ops, kind="comm")
        total = ops_time_s(ops)
        optimizer = costs.OPTIMIZER_STATE_BYTES * params
        grads = setup.grad_bytes * params
        if setup.distributed_optimizer and setup.shard_gradients:
            optimizer += grads
            grads = 0.0
        state = p * params + grads + fp8_extra + (0.0 if setup.distributed_optimizer else optimizer)
        out.append(
            NodeCost(
                tmpc_id=tid,
                time_per_sample_s=total,
                compute_s=total - comm,
                communication_s=comm,
                params_per_device=params,
                activation_bytes=act,
                state_bytes=state,
                sharded_state_bytes=optimizer if setup.distributed_optimizer else 0.0,
                gradient_bytes=setup.grad_bytes * params,
                forward_s=ops_time_s(ops, phase="forward"),
                backward_s=ops_time_s(ops, phase="backward") + ops_time_s(ops, phase="recompute"),
                p2p_bytes=p2p_bytes_per_device(cfg, setup, t, sp),
                step_s=optimizer_step_time_s(hw, params, p, setup.grad_bytes),
            )
        )
    return out


def model_parallel_node_costs(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, kind: str,
                              t: int, window: int | None = None, variant: str | None = None) -> list[NodeCost]:
    """The TMPCs of a node at degree key t, the model-parallel width t_tensor x c with
    c = ``setup.context_parallel`` (docs/problem.md §11): :func:`node_costs` at c = 1, else the
    tensor-parallel costs of s / c tokens at t_tensor = t / c with the layer's context-parallel
    attention (ring, all-to-all, all-gather or both: :func:`~piper.frontend.context.layer_comm_type`), the weights'
    reduction over c and the state sharded over c (:mod:`piper.frontend.context`). ``variant``
    "moe": an MoE layer (:func:`~piper.frontend.moe_costs.layer_costs`): the same, its experts
    dispatching the s / c tokens of each device and their weights, state and copies as at c = 1
    (the expert keys of docs/problem.md §11 count the copies over the width t_tensor x c x d, which
    is how Megatron-Core lays expert parallelism over the data- and context-parallel ranks)."""
    c = setup.context_parallel
    max_devices = setup.nodes * hw.devices_per_node
    if c == 1:
        if variant is not None:
            return layer_costs(cfg, hw, setup, t, variant, max_devices, window)
        return node_costs(cfg, hw, setup, kind, t, window)
    if t % c:
        raise FrontendError(f"degree {t} is not a multiple of the context-parallel size (--cp) {c}")
    tt = t // c
    comm_type = context.layer_comm_type(setup.cp_comm_type, window)
    local_cfg = context.local_config(cfg, c)
    if variant is None:
        local = node_costs(local_cfg, hw, setup, kind, tt, window)
        whole = node_costs(cfg, hw, setup, kind, tt, window)
    else:
        local = layer_costs(local_cfg, hw, setup, tt, variant, max_devices, window)
        whole = layer_costs(cfg, hw, setup, tt, variant, max_devices, window)
    hw_eff = effective_hardware(hw, setup)
    link = context.context_link(hw_eff, t)
    kv = context.kv_block_bytes(cfg, c, tt)

    def attention_of(fwd: Any, bwd: Any) -> Any:
        fwd_flops, bwd_flops = (fwd.flops if fwd is not None else 0.0), (bwd.flops if bwd is not None else 0.0)
        if comm_type == "a2a":
            return context.all_to_all_attention(hw_eff, cfg, c, tt, fwd_flops, bwd_flops, window)
        if comm_type == "allgather":
            return context.all_gather_attention(hw_eff, cfg, c, tt, fwd_flops, bwd_flops, link, window)
        if comm_type == "a2a+p2p":
            assert setup.cp_a2a_size is not None  # check_context asks for it
            return context.hierarchical_attention(hw_eff, cfg, c, setup.cp_a2a_size, tt, fwd_flops, bwd_flops, link)
        return context.ring_attention(hw_eff, c, fwd.time_s if fwd is not None else 0.0,
                                      bwd.time_s if bwd is not None else 0.0, kv, link)

    network, intra = resync_bandwidths(hw_eff, setup, t)
    bandwidth = intra if t <= hw.devices_per_node else network
    f = all_reduce_factor(cfg, setup)
    out = []
    for lc, wc in zip(local, whole, strict=True):
        recompute, sp = parse_tmpc_id(lc.tmpc_id)
        if variant is not None:
            ops = layer_tmpc_ops(local_cfg, hw, setup, tt, variant, lc.tmpc_id, window)
        else:
            ops = (node_ops(kind, local_cfg, hw_eff, tt, recompute, sp, setup.kernels(), window, setup.recompute_modules)
                   if kind == "transformer" else None)
        resync = context.context_resync_s(f, wc.gradient_bytes, c, setup.global_batch // cfg.micro_batch, bandwidth)
        out.append(context.with_context(lc, wc, ops, attention_of, c, resync_s=resync,
                                        distributed_optimizer=setup.distributed_optimizer))
    return out


def resync_overlap_s(cost: NodeCost, setup: TrainingSetup) -> float:
    """``resyncOverlapTime``: the part of one micro-batch of this node during which the stage's
    data-parallel resync can run (its backward pass with ``--overlap-grad-reduce``, its forward
    pass with ``--overlap-param-gather``), times ``setup.resync_overlap_microbatches``, seconds."""
    one = (cost.backward_s if setup.overlap_grad_reduce else 0.0) + (cost.forward_s if setup.overlap_param_gather else 0.0)
    return setup.resync_overlap_microbatches * one


def resync_bandwidths(hw: Hardware, setup: TrainingSetup, t_max: int = 1) -> tuple[float, float]:
    """(B, B_in): the achieved bus bandwidth of the data-parallel collective between nodes and inside
    one (reduce-scatter with the distributed optimizer, all-reduce without), bytes/s per device.

    Between nodes a data-parallel ring of a layout with tensor-parallel degree t has G/t members
    in each node and the t rings of a node share its G network links, so each device's share
    is G/t links' worth, at most its NVLink (NCCL spreads a ring's channels over every NIC of
    the node; nccl-tests reports a bus bandwidth near the node's total network bandwidth for an
    all-reduce over all the GPUs of several nodes). The workload's B holds for every degree it
    offers: G/t_max links (one link when t_max = G, the SC'21 and Llama 3 layouts)."""
    coll = "reduce_scatter" if setup.distributed_optimizer else "all_reduce"
    links = max(1.0, hw.devices_per_node / t_max)
    network = min(hw.nvlink_bandwidth, hw.network_bandwidth * links)
    return (network * hw.collective_efficiency("network", coll),
            hw.nvlink_bandwidth * hw.collective_efficiency("nvlink", coll))


def workload_nodes(cfg: TransformerConfig) -> list[tuple[str, int]]:
    """The nodes of ``cfg``'s workload in order, (kind, layer index) each: the embedding, every
    transformer layer, the final norm and the output head (:func:`build_workload` writes these)."""
    last = cfg.layers - 1
    return [("embedding", 0), *(("transformer", i) for i in range(cfg.layers)), ("final_norm", last), ("output_head", last)]


def model_record(cfg: TransformerConfig, setup: TrainingSetup) -> dict[str, Any]:
    """The workload's top-level ``model`` key: the model and training shape the workload was
    built from, for tools that need them besides the layer costs (``python -m piper export``
    writes Megatron-LM / DeepSpeed / torchtitan settings from it). Counts, except
    ``precisionBytes`` and ``gradBytes`` (bytes per element); ``microBatch`` and
    ``globalBatch`` are sequences (one Piper sample is one micro-batch of ``microBatch``
    sequences, so ``globalBatch`` = ``mbsInBatch`` x ``microBatch``)."""
    comm_types = context.layer_comm_types(cfg, setup.cp_comm_type)
    return {
        "name": cfg.name,
        "layers": cfg.layers,
        "hiddenSize": cfg.hidden_size,
        "ffnHiddenSize": cfg.ffn_hidden_size,
        "attentionHeads": cfg.attention_heads,
        "kvHeads": cfg.kv_heads,
        "vocabSize": cfg.vocab_size,
        "seqLength": cfg.seq_length,
        "ffnKind": cfg.ffn_kind,
        "norm": cfg.norm,
        "linearBias": cfg.linear_bias,
        "learnedPositions": cfg.learned_positions,
        "tiedEmbeddings": cfg.tied_embeddings,
        "precisionBytes": cfg.precision_bytes,
        "precision": cfg.precision,
        "dropout": cfg.dropout,
        "microBatch": cfg.micro_batch,
        "globalBatch": setup.global_batch,
        "distributedOptimizer": setup.distributed_optimizer,
        "gradBytes": setup.grad_bytes,
        # written only for c > 1, so that c = 1 workloads are what they were (absent: 1)
        **({"contextParallel": setup.context_parallel} if setup.context_parallel > 1 else {}),
        # the layers' context-parallel schemes, written only when one is not the ring (so that the
        # other workloads are what they were; absent: "p2p" on every layer)
        **({"cpCommTypes": comm_types} if setup.context_parallel > 1 and set(comm_types) != {"p2p"} else {}),
        **({"cpA2aSize": setup.cp_a2a_size} if setup.context_parallel > 1 and "a2a+p2p" in comm_types else {}),
        **_moe_record(cfg),
        # written only when they differ from the default, so that other workloads are what they were
        **({"tokenDispatcher": setup.token_dispatcher}
           if cfg.moe is not None and setup.token_dispatcher != "alltoall" else {}),
        **({"slidingWindow": {"tokens": cfg.sliding_window, "layers": list(cfg.sliding_window_layers)}}
           if cfg.sliding_window is not None else {}),
        # what the TMPC "selective" recomputes, written only when it is not Megatron-Core's default
        **({"recomputeModules": list(setup.recompute_modules)}
           if setup.recompute_modules != DEFAULT_RECOMPUTE_MODULES else {}),
    }


def check_recompute_modules_for(cfg: TransformerConfig, modules: tuple[str, ...]) -> None:
    """Refuse a recompute module that recomputes nothing in ``cfg`` (piper/frontend/recompute.py:
    :func:`~piper.frontend.recompute.check_modules_for_model`), naming it."""
    n_moe = moe_layer_count(cfg.moe, cfg.layers)
    check_modules_for_model(modules, name=cfg.name, moe_layers=n_moe, dense_layers=cfg.layers - n_moe,
                            mla=cfg.mla is not None, fp8=cfg.precision == "fp8",
                            shared_experts=bool(cfg.moe is not None and cfg.moe.shared_ffn_hidden_size))


def _moe_record(cfg: TransformerConfig) -> dict[str, Any]:
    """The model record's optional keys of MoE / MLA models and head widths other than h / a (issue 31)."""
    out: dict[str, Any] = {}
    if cfg.attention_head_dim is not None:
        out["attentionHeadDim"] = cfg.attention_head_dim
    if cfg.moe is not None:
        m = cfg.moe
        out["moe"] = {"experts": m.experts, "topK": m.top_k, "expertFfnHiddenSize": m.expert_ffn_hidden_size,
                      "sharedFfnHiddenSize": m.shared_ffn_hidden_size, "firstDenseLayers": m.first_dense_layers,
                      "layerFreq": m.layer_freq, "layerOffset": m.layer_offset, "routerScore": m.router_score,
                      "capacityFactor": m.capacity_factor}
    if cfg.mla is not None:
        out["mla"] = {"qLoraRank": cfg.mla.q_lora_rank, "kvLoraRank": cfg.mla.kv_lora_rank,
                      "qkNopeHeadDim": cfg.mla.qk_nope_head_dim, "qkRopeHeadDim": cfg.mla.qk_rope_head_dim,
                      "vHeadDim": cfg.mla.v_head_dim}
    return out


def sequence_splits(cfg: TransformerConfig, context_parallel: int, tensor_parallel: int) -> bool:
    """Whether sequence parallelism can split a sequence's tokens per context-parallel rank
    (s / c, whole) evenly over ``tensor_parallel`` devices, as Megatron's scatter to the
    sequence-parallel region needs."""
    return cfg.seq_length % context_parallel == 0 and (cfg.seq_length // context_parallel) % tensor_parallel == 0


def offered_degrees(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup) -> list[int]:
    """The degree keys t_tensor x c a workload offers unless told (:func:`build_workload`): every
    tensor-parallel size of :func:`tensor_parallel_degrees` times c that fits the devices and, when a
    layer runs the all-to-all context-parallel scheme, leaves each device whole heads
    (:func:`~piper.frontend.context.all_to_all_heads_ok`)."""
    c = setup.context_parallel
    tensor_degrees = tensor_parallel_degrees(cfg, hw)
    if c > 1 and context.uses_all_to_all(cfg, setup.cp_comm_type):
        group = context.all_to_all_group(setup.cp_comm_type, c, setup.cp_a2a_size)
        tensor_degrees = [tt for tt in tensor_degrees if context.all_to_all_heads_ok(cfg, group, tt)]
    if cfg.moe is not None and setup.sequence_parallel is False:
        tensor_degrees = [1]  # Megatron-Core: an MoE model with t_tensor > 1 runs sequence parallelism
    if setup.sequence_parallel is True or cfg.moe is not None:
        # sequence parallelism at every t_tensor > 1 (an MoE model's too): Megatron splits each context-
        # parallel rank's s / c tokens evenly over the tensor-parallel group
        tensor_degrees = [tt for tt in tensor_degrees if tt == 1 or sequence_splits(cfg, c, tt)]
    return context.model_parallel_degrees(tensor_degrees, c, setup.nodes * hw.devices_per_node)


def build_workload(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup | None = None,
                   degrees: tuple[int, ...] | None = None, recompute: tuple[str, ...] | None = None,
                   node_costs: dict[tuple[str, str | None, int | None, int], list[Any]] | None = None
                   ) -> dict[str, Any]:
    """The workload JSON object (loadable by :func:`piper.load_problem` with ``strict=True``:
    only keys of docs/problem.md, plus the top-level ``name`` and ``model``
    (:func:`model_record`)). The keys of docs/problem.md §10 (``resyncOverlapTime``,
    ``stepTime``, ``stepTimeSharded``) are written only when the setup asks for them
    (``overlap_grad_reduce`` / ``overlap_param_gather``, ``optimizer_step``). A layer's TMPCs at one
    degree share one ``resyncOverlapTime``, the least of theirs (recomputation lengthens the backward
    pass the gradient reduce hides behind; the least is what every choice hides at least), so that
    Piper's DP prices the keys exactly (piper/dp/iteration.py: it needs a layer's TMPCs at a degree to
    share them); a workload with one TMPC per layer and degree (``score``'s) keeps its own.

    ``degrees`` / ``recompute`` (optional) keep only those tensor-parallel degrees and the
    transformer TMPCs of those recomputation kinds (``python -m piper score`` builds the one
    layout it scores).

    ``node_costs`` (optional): a dict the layers' cost records are kept in and read from, to share
    between calls with the same ``cfg``, ``hw`` and ``setup`` that differ in ``degrees`` or
    ``recompute`` only (the planner's search builds three recomputation settings and every degree
    of one (micro-batch, c, scheme, e)); never share it across other calls."""
    setup = setup or TrainingSetup()
    if setup.global_batch % cfg.micro_batch:
        raise FrontendError(
            f"global batch ({setup.global_batch} sequences) must be a multiple of the micro-batch ({cfg.micro_batch})"
        )
    if cfg.precision == "fp8":
        hw.peak("fp8")  # one line naming peak_flops_fp8 when the device has none
    reserve = setup.reserve_bytes(hw)
    memory = hw.memory_bytes - reserve
    if memory <= 0:
        raise FrontendError(f"the memory reserve (memory_reserve_bytes, --memory-reserve) of {reserve:.6g} bytes leaves "
                            f"no memory: the device has {hw.memory_bytes:.6g} bytes")
    check_recompute_modules_for(cfg, setup.recompute_modules)
    c = setup.context_parallel
    context.check_context(cfg, c, flash_attention=setup.flash_attention, comm_type=setup.cp_comm_type,
                          a2a_size=setup.cp_a2a_size)
    # named degrees are checked against every width (a failing all-to-all then names its heads)
    allowed = (offered_degrees(cfg, hw, setup) if degrees is None else
               context.model_parallel_degrees(tensor_parallel_degrees(cfg, hw), c, setup.nodes * hw.devices_per_node))
    if not allowed:
        group = context.all_to_all_group(setup.cp_comm_type, c, setup.cp_a2a_size)
        why = (f" whose {cfg.attention_heads} query and {cfg.split_kv_heads} "
               f"key/value heads split {group} ways for the all-to-all (--cp-comm-type "
               f"{setup.cp_comm_type or 'a2a'})" if c > 1 and context.uses_all_to_all(cfg, setup.cp_comm_type) else "")
        raise FrontendError(f"context-parallel size (--cp) {c}: no tensor-parallel degree t{why} "
                            f"has t x {c} <= the {setup.nodes * hw.devices_per_node} devices")
    if degrees is not None:
        bad = [t for t in degrees if t not in allowed]
        if bad:
            raise FrontendError(f"tensor-parallel degree {bad[0]} is not one of {allowed}")
    degrees = list(allowed if degrees is None else degrees)
    chain = workload_nodes(cfg)
    # the edge carries the fewest bytes any TMPC sends (split the most ways); each TMPC's
    # syncTimeFw / syncTimeBw adds what its own layout sends beyond that
    edge_bytes = min(p2p_bytes_per_device(cfg, setup, t, True) for t in degrees)
    overlap = setup.overlap_grad_reduce or setup.overlap_param_gather
    nodes = []
    # identical layers cost the same
    cache: dict[tuple[str, str | None, int | None, int], list[Any]] = {} if node_costs is None else node_costs
    for nid, (kind, layer) in enumerate(chain):
        tmpcs: dict[str, list[dict[str, Any]]] = {}
        variant = layer_variant(cfg, kind, layer)  # MoE and MLA layers: piper/frontend/moe_costs.py
        window = cfg.attention_window(layer) if kind == "transformer" else None
        for t in degrees:
            entries = []
            t_tensor = t // setup.context_parallel
            splits = sequence_splits(cfg, setup.context_parallel, t_tensor)  # may SP's TMPCs run at t?
            key = (kind, variant, window, t)
            if key not in cache:
                cache[key] = model_parallel_node_costs(cfg, hw, setup, kind, t, window, variant)
            # why records were left out, by the filter that dropped them (the deepest one reached is the
            # error's reason when none is left)
            skipped: dict[int, str] = {}
            for c in cache[key]:
                if recompute is not None and kind == "transformer" and parse_tmpc_id(c.tmpc_id)[0] not in recompute:
                    skipped.setdefault(1, f"none of the recomputation kinds asked for ({', '.join(recompute)})")
                    continue
                sp = parse_tmpc_id(c.tmpc_id)[1]
                if cfg.moe is not None and t_tensor > 1 and not sp:
                    # Megatron-Core: an MoE model with t_tensor > 1 runs sequence parallelism everywhere
                    skipped.setdefault(2, "sequence parallelism, which an MoE model needs at t > 1, is off")
                    continue
                if sp and t_tensor > 1 and not splits:
                    # sequence parallelism cannot split the tokens evenly: Megatron refuses it
                    skipped.setdefault(3, f"sequence parallelism cannot split the "
                                          f"{cfg.seq_length // setup.context_parallel} tokens per context-parallel "
                                          f"rank {t_tensor} ways")
                    continue
                extra = c.p2p_bytes - edge_bytes
                entry: dict[str, Any] = {
                    "id": c.tmpc_id,
                    "timePerSample": c.time_per_sample_s,
                    "parameterSize": c.gradient_bytes,
                    "memoryUsageA": c.activation_bytes,
                    "memoryUsageB": c.state_bytes,
                    "memoryUsageShardedB": c.sharded_state_bytes,
                    "syncTimeFw": {str(nid - 1): extra} if nid > 0 else {},
                    "syncTimeBw": {str(nid + 1): extra} if nid + 1 < len(chain) else {},
                }
                if getattr(c, "expert_parallel", 1) > 1 or getattr(c, "expert_param_bytes", 0.0) > 0:
                    entry.update({"expertParallel": c.expert_parallel, "expertTensorParallel": c.expert_tensor_parallel,
                                  "expertParameterSize": c.expert_param_bytes,
                                  "memoryUsageShardedExpertB": c.expert_sharded_bytes})
                if overlap:
                    entry["resyncOverlapTime"] = resync_overlap_s(c, setup)
                if setup.optimizer_step:
                    entry["stepTimeSharded" if setup.distributed_optimizer else "stepTime"] = c.step_s
                entries.append(entry)
            if not entries:
                why = (skipped[max(skipped)] if skipped else
                       "no expert layout fits the devices (the flex dispatcher needs e > 1)"
                       if cfg.moe is not None and setup.token_dispatcher == "flex" else "none is offered")
                raise FrontendError(f"node {nid} ({kind}{f' layer {layer}' if kind == 'transformer' else ''}) has no TMPC at "
                                    f"degree {t}: {why}")
            if overlap and entries:
                # one h per layer and degree: the least its TMPCs hide behind (see the docstring)
                least = min(e["resyncOverlapTime"] for e in entries)
                for e in entries:
                    e["resyncOverlapTime"] = least
            tmpcs[str(t)] = entries
        nodes.append({"id": nid, "name": NODE_NAMES[kind], "kind": kind, "layerIndex": layer, "TMPCs": tmpcs})
    edges = [{"sourceId": i, "destId": i + 1, "communicationCost": edge_bytes} for i in range(len(chain) - 1)]
    bw, bw_in = resync_bandwidths(effective_hardware(hw, setup), setup, max(degrees))
    return {
        "name": f"{cfg.name} on {setup.nodes} x {hw.devices_per_node} {hw.name}, b={cfg.micro_batch}, s={cfg.seq_length}",
        "model": model_record(cfg, setup),
        "maxDevices": setup.nodes * hw.devices_per_node,
        "maxMemoryPerDevice": memory,
        "mbsInBatch": setup.global_batch // cfg.micro_batch,
        "bandwidth": bw,
        "devicesPerNode": hw.devices_per_node,
        "intraNodeBandwidth": bw_in,
        "allReduceFactor": all_reduce_factor(cfg, setup),
        **({"resyncOverlapWindow": setup.resync_overlap_window}
           if overlap and setup.resync_overlap_window != WINDOW_MICROBATCH else {}),
        "nodes": nodes,
        "edges": edges,
    }
