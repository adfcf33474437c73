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
from piper.frontend import costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.tmpc import parse_tmpc_id, tmpc_ids

__all__ = [
    "TrainingSetup", "tensor_parallel_degrees", "all_reduce_factor", "build_workload", "model_record", "node_costs", "NodeCost",
]

KINDS = ("embedding", "transformer", "final_norm", "output_head")
NODE_NAMES = {
    "embedding": "Embedding",
    "transformer": "ParallelTransformerLayer",
    "final_norm": "FinalNorm",
    "output_head": "OutputHead",
}


@dataclass(frozen=True)
class TrainingSetup:
    """How the model is trained, beyond the model and the hardware."""

    #: number of nodes (servers) of ``Hardware.devices_per_node`` devices
    nodes: int = 1
    #: sequences per iteration (the global batch)
    global_batch: int = 2048
    #: fraction of peak FLOP/s the layers reach. 0.5 by default: Megatron-LM
    #: reached 44-52% of A100 peak on the GPT models of [SC21] Table 1.
    efficiency: float = 0.5
    #: shard fp32 master weights and Adam state over data-parallel replicas (ZeRO-1)
    distributed_optimizer: bool = True
    #: bytes per gradient element: 2 (bf16, [ZeRO]'s accounting) or 4 (fp32 accumulation)
    grad_bytes: int = 2
    #: bytes per device kept back from the planner (framework, fragmentation)
    memory_reserve_bytes: float = 0.0
    #: recomputation assumed for the reported hardware FLOPs (the workload offers all kinds)
    recompute: str = "full"

    def __post_init__(self) -> None:
        for name in ("nodes", "global_batch", "grad_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FrontendError(f"{name} must be a whole number >= 1, got {value!r}")
        if not 0 < self.efficiency <= 1:
            raise FrontendError(f"efficiency must be in (0, 1], got {self.efficiency!r}")
        if self.memory_reserve_bytes < 0:
            raise FrontendError(f"memory reserve must be >= 0 bytes, got {self.memory_reserve_bytes!r}")
        if self.recompute not in costs.RECOMPUTE_KINDS:
            raise FrontendError(f"recompute must be one of {', '.join(costs.RECOMPUTE_KINDS)}, got {self.recompute!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tensor_parallel_degrees(cfg: TransformerConfig, hw: Hardware) -> list[int]:
    """Degrees t Megatron-LM accepts within one node: t divides the attention
    heads, the key/value heads (Megatron-core requires num_query_groups % t == 0;
    it does not replicate KV heads), the FFN width, and the devices per node (so
    a tensor-parallel group never spans two nodes)."""
    return [
        t
        for t in range(1, hw.devices_per_node + 1)
        if hw.devices_per_node % t == 0
        and cfg.attention_heads % t == 0
        and cfg.kv_heads % t == 0
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


@dataclass(frozen=True)
class NodeCost:
    """The numbers of one node at one degree t and TMPC (seconds, bytes)."""

    tmpc_id: str
    time_per_sample_s: float
    compute_s: float
    communication_s: float
    params_per_device: float
    activation_bytes: float
    state_bytes: float
    sharded_state_bytes: float
    gradient_bytes: float


def node_costs(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, kind: str, t: int) -> list[NodeCost]:
    """The TMPCs of a node of ``kind`` at degree t, in the order written to the workload."""
    if kind not in KINDS:
        raise FrontendError(f"unknown node kind {kind!r}")
    b, s, h, p = cfg.micro_batch, cfg.seq_length, cfg.hidden_size, cfg.precision_bytes
    activation_message = p * b * s * h
    speed = t * hw.peak_flops * setup.efficiency
    ids = tmpc_ids(t) if kind == "transformer" else tmpc_ids(t, ("none",))
    if kind == "transformer":
        params = costs.layer_params(cfg).per_device(t)
    elif kind == "embedding":
        params = cfg.vocab_size * h / t + (s * h if cfg.learned_positions else 0)
    elif kind == "final_norm":
        params = float(costs.final_norm_params(cfg))
    else:
        params = cfg.vocab_size * h / t
    out = []
    for tid in ids:
        recompute, sp = parse_tmpc_id(tid)
        if kind == "transformer":
            flops = costs.layer_train_flops(cfg, recompute)
            collectives = costs.layer_tp_collectives(recompute)
            act = costs.layer_activation_bytes(cfg, t, recompute, sp)
        elif kind == "embedding":
            flops, collectives = 0.0, 1
            act = costs.embedding_activation_bytes(cfg, t, sp)
        elif kind == "final_norm":
            flops, collectives = 0.0, 0
            act = costs.final_norm_activation_bytes(cfg, t, sp)
        else:
            flops, collectives = 3 * costs.head_forward_flops(cfg), 1
            act = costs.head_activation_bytes(cfg, t, sp)
        compute = b * flops / speed
        comm = collectives * costs.allreduce_bytes_per_device(activation_message, t) / hw.nvlink_bandwidth
        optimizer = costs.OPTIMIZER_STATE_BYTES * params
        state = (p + setup.grad_bytes) * params + (0.0 if setup.distributed_optimizer else optimizer)
        out.append(
            NodeCost(
                tmpc_id=tid,
                time_per_sample_s=compute + comm,
                compute_s=compute,
                communication_s=comm,
                params_per_device=params,
                activation_bytes=act,
                state_bytes=state,
                sharded_state_bytes=optimizer if setup.distributed_optimizer else 0.0,
                gradient_bytes=setup.grad_bytes * params,
            )
        )
    return out


def _chain(cfg: TransformerConfig) -> list[tuple[str, int]]:
    last = cfg.layers - 1
    return [("embedding", 0), *(("transformer", i) for i in range(cfg.layers)), ("final_norm", last), ("output_head", last)]


def model_record(cfg: TransformerConfig, setup: TrainingSetup) -> dict[str, Any]:
    """The workload's top-level ``model`` key: the model and training shape the workload was
    built from, for tools that need them besides the layer costs (``python -m piper export``
    writes Megatron-LM / DeepSpeed / torchtitan settings from it). Counts, except
    ``precisionBytes`` and ``gradBytes`` (bytes per element); ``microBatch`` and
    ``globalBatch`` are sequences (one Piper sample is one micro-batch of ``microBatch``
    sequences, so ``globalBatch`` = ``mbsInBatch`` x ``microBatch``)."""
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
        "microBatch": cfg.micro_batch,
        "globalBatch": setup.global_batch,
        "distributedOptimizer": setup.distributed_optimizer,
        "gradBytes": setup.grad_bytes,
    }


def build_workload(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup | None = None) -> dict[str, Any]:
    """The workload JSON object (loadable by :func:`piper.load_problem` with ``strict=True``:
    only keys of docs/problem.md version 2, plus the top-level ``name`` and ``model``
    (:func:`model_record`))."""
    setup = setup or TrainingSetup()
    if setup.global_batch % cfg.micro_batch:
        raise FrontendError(
            f"global batch ({setup.global_batch} sequences) must be a multiple of the micro-batch ({cfg.micro_batch})"
        )
    memory = hw.memory_bytes - setup.memory_reserve_bytes
    if memory <= 0:
        raise FrontendError(f"memory reserve ({setup.memory_reserve_bytes:.6g} bytes) leaves no memory of {hw.memory_bytes:.6g}")
    degrees = tensor_parallel_degrees(cfg, hw)
    chain = _chain(cfg)
    nodes = []
    for nid, (kind, layer) in enumerate(chain):
        tmpcs: dict[str, list[dict[str, Any]]] = {}
        for t in degrees:
            tmpcs[str(t)] = [
                {
                    "id": c.tmpc_id,
                    "timePerSample": c.time_per_sample_s,
                    "parameterSize": c.gradient_bytes,
                    "memoryUsageA": c.activation_bytes,
                    "memoryUsageB": c.state_bytes,
                    "memoryUsageShardedB": c.sharded_state_bytes,
                    "syncTimeFw": {str(nid - 1): 0.0} if nid > 0 else {},
                    "syncTimeBw": {str(nid + 1): 0.0} if nid + 1 < len(chain) else {},
                }
                for c in node_costs(cfg, hw, setup, kind, t)
            ]
        nodes.append({"id": nid, "name": NODE_NAMES[kind], "kind": kind, "layerIndex": layer, "TMPCs": tmpcs})
    edge_bytes = float(cfg.precision_bytes * cfg.micro_batch * cfg.seq_length * cfg.hidden_size)
    edges = [{"sourceId": i, "destId": i + 1, "communicationCost": edge_bytes} for i in range(len(chain) - 1)]
    return {
        "name": f"{cfg.name} on {setup.nodes} x {hw.devices_per_node} {hw.name}, b={cfg.micro_batch}, s={cfg.seq_length}",
        "model": model_record(cfg, setup),
        "maxDevices": setup.nodes * hw.devices_per_node,
        "maxMemoryPerDevice": memory,
        "mbsInBatch": setup.global_batch // cfg.micro_batch,
        "bandwidth": hw.network_bandwidth,
        "devicesPerNode": hw.devices_per_node,
        "intraNodeBandwidth": hw.nvlink_bandwidth,
        "allReduceFactor": all_reduce_factor(cfg, setup),
        "nodes": nodes,
        "edges": edges,
    }
