"""A plan as a DeepSpeed ``ds_config.json`` and a ``PipelineModule`` partition.

Keys as in DeepSpeed's configuration reference (deepspeed.ai/docs/config-json) and
``deepspeed/runtime/pipe/module.py`` (``PipelineModule``); see docs/export.md.

* ``ds_config.json``: ``train_micro_batch_size_per_gpu`` = b, ``gradient_accumulation_steps``
  = N / d (the micro-batches one pipeline replica runs per step), ``train_batch_size`` = N x b
  (DeepSpeed checks train_batch_size = micro x accumulation x data-parallel size),
  ``zero_optimization.stage`` 1 when the chosen TMPCs shard state, else 0 (pipeline
  parallelism runs with ZeRO stage 0 or 1 only), ``bf16`` for 2-byte workloads,
  ``activation_checkpointing`` (DeepSpeed's defaults) when the layers recompute;
* the partition (a second file): the layer list [embedding side, transformer layer 0..l-1,
  head side], the boundaries ``parts`` (stage i builds ``layers[parts[i]:parts[i+1]]``),
  ``activation_checkpoint_interval`` (1: every layer recomputed, 0: none) and the
  topology (``PipeModelDataParallelTopology(num_pp=p, num_mp=t, num_dp=d)``).
  ``partition_method`` ("parameters", "uniform", "type:REGEX") cannot express an arbitrary
  split, so the partition is passed by overriding ``PipelineModule._partition_layers``
  (the snippet in ``how_to`` and docs/export.md).
"""

from __future__ import annotations

import json

from piper.export.common import Export, ExportPlan, refuse, selective_words

__all__ = ["DEEPSPEED_SOURCE", "PIPELINE_SNIPPET", "export_deepspeed", "partition"]

#: what the keys were checked against (docs/export.md, "Versions")
DEEPSPEED_SOURCE = "DeepSpeed master (deepspeed/runtime/pipe/module.py, docs/config-json)"

#: how to pass explicit boundaries to PipelineModule (its partition_method cannot)
PIPELINE_SNIPPET = """\
from deepspeed.pipe import PipelineModule

class PlannedPipelineModule(PipelineModule):
    \"\"\"PipelineModule with the stage boundaries of a Piper plan (PARTS from the export).\"\"\"

    def __init__(self, *args, parts, **kwargs):
        self._planned_parts = list(parts)
        super().__init__(*args, **kwargs)

    def _partition_layers(self, method="uniform"):
        stage = self._topo.get_coord(self.global_rank).pipe
        self.parts = self._planned_parts
        self._set_bounds(start=self.parts[stage], stop=self.parts[stage + 1])

# layers = [embedding, transformer layer 0, ..., transformer layer l-1, head]  (LayerSpecs)
# model = PlannedPipelineModule(layers=layers, parts=PARTS, topology=TOPOLOGY,
#                               activation_checkpoint_interval=INTERVAL, loss_fn=...)
"""


def partition(ep: ExportPlan) -> tuple[list[str], list[int]]:
    """(layer names, boundaries): the layer list [embedding side, transformer layers, head
    side] and ``parts`` with stage i holding ``names[parts[i]:parts[i+1]]``."""
    has_pre = bool(ep.layer_map.pre)
    has_post = bool(ep.layer_map.post)
    names = (["embedding"] if has_pre else []) + [f"transformer.{i}" for i in range(ep.num_layers)] + (
        ["head"] if has_post else [])
    parts = [0]
    for st in ep.stages:
        size = st.n_layers + (1 if st.pre and has_pre else 0) + (1 if st.post and has_post else 0)
        parts.append(parts[-1] + size)
    return names, parts


def _interval(ep: ExportPlan) -> int:
    kinds = {r for st in ep.stages for r in st.recompute}
    if "selective" in kinds:
        st = next(s for s in ep.stages if "selective" in s.recompute)
        raise refuse("deepspeed", "E4", f"stage {st.index} uses selective recomputation (of {selective_words(ep)} only); "
                     "DeepSpeed's PipelineModule checkpoints whole layers (activation_checkpoint_interval)",
                     recompute=True, stage=st.index)
    if kinds == {"full", "none"}:
        st = next(s for s in ep.stages if "none" in s.recompute)
        other = next(s for s in ep.stages if "full" in s.recompute)
        raise refuse("deepspeed", "E6", f"stage {other.index} recomputes {other.count('full')} of its "
                     f"{other.n_layers} transformer layers, stage {st.index} keeps {st.count('none')} layers' "
                     "activations; activation_checkpoint_interval checkpoints every layer of every stage or none",
                     recompute=True, stage=st.index)
    return 1 if kinds == {"full"} else 0


def _moe(ep: ExportPlan, d: int, notes: list[str]) -> dict[str, int] | None:
    """DeepSpeed-MoE's settings of an MoE model (``deepspeed.moe.layer.MoE(num_experts, ep_size, k)``:
    the experts split over ep_size data-parallel ranks, whole; ep_size divides the data-parallel size),
    or a refusal (rule E9)."""
    m = ep.model
    if m is None or m.moe is None:
        return None
    e, et = ep.expert_layout
    if et > 1:
        raise refuse("deepspeed", "E9", f"the plan splits each expert over e_t = {et} devices; DeepSpeed-MoE keeps "
                     "every expert whole on one rank (no expert tensor parallelism)")
    if m.token_dispatcher != "alltoall":
        raise refuse("deepspeed", "E9", f"the workload was priced for the {m.token_dispatcher!r} token dispatcher "
                     "(DeepEP / HybridEP: one copy of a token per destination device and node); DeepSpeed-MoE "
                     "dispatches with its own all-to-all; re-plan with --token-dispatcher alltoall")
    if d % e:
        raise refuse("deepspeed", "E9", f"the plan spreads the experts over e = {e} devices, which does not divide "
                     f"the data-parallel size {d}; DeepSpeed-MoE's ep_size must divide it")
    notes.append(f"experts: pass ep_size={e}, num_experts={m.moe['experts']}, k={m.moe['topK']} to "
                 "deepspeed.moe.layer.MoE for each MoE layer (not a ds_config key)")
    return {"ep_size": e, "num_experts": int(m.moe["experts"]), "k": int(m.moe["topK"])}


def export_deepspeed(ep: ExportPlan) -> Export:
    """The DeepSpeed config (``text``, JSON) and the pipeline partition (``extra_files``
    "pipeline.json"); :class:`ExportError` for sequence parallelism and selective or mixed
    recomputation (rules E4, E6)."""
    if ep.interleaved:
        raise refuse("deepspeed", "E8", f"the plan uses the interleaved schedule ({ep.virtual_stages} chunks per "
                     "device group); DeepSpeed's pipeline engine (deepspeed.runtime.pipe) runs 1F1B only",
                     hint="re-plan with --schedule 1f1b")
    if ep.context_parallel > 1:
        types = sorted({ep.model.cp_comm_type_of(i) if ep.model is not None else "p2p" for i in range(ep.num_layers)})
        raise refuse("deepspeed", "E4", f"the workload was built for context parallelism c={ep.context_parallel} "
                     f"(Megatron-Core's --cp-comm-type {', '.join(types)}); DeepSpeed's pipeline engine has no "
                     "context parallelism (its Ulysses sequence parallelism, the a2a scheme, is wired through "
                     "DistributedAttention in the model code and the Hugging Face integration, not ds_config)",
                     hint="re-plan with --cp 1 or export to Megatron-LM")
    d, t = ep.uniform()
    p = ep.pipeline
    notes = list(ep.notes)
    if any(f for st in ep.stages for f in st.sequence_parallel):
        st = next(s for s in ep.stages if any(s.sequence_parallel))
        raise refuse("deepspeed", "E4",
                     f"stage {st.index} uses Megatron-style sequence parallelism (TMPCs '+sp'), which DeepSpeed's "
                     "PipelineModule does not provide (its sequence_parallel_size is Ulysses, another scheme)",
                     stage=st.index,
                     hint="re-plan without them: python -m piper plan MODEL --sequence-parallel off (a dense "
                          "model), or python -m piper solve WORKLOAD --uniform with --exclude-tmpc ID for each "
                          "TMPC id with '+sp' that python -m piper info WORKLOAD lists (an MoE model's layers need "
                          "sequence parallelism at t > 1: t = 1 then)")
    interval = _interval(ep)
    moe = _moe(ep, d, notes)
    if ep.model is not None and ep.model.sliding_window is not None:
        notes.append(f"sliding window: {ep.model.sliding_window} tokens on {len(ep.model.sliding_window_layers)} of "
                     f"{ep.model.layers} layers, as priced; the attention is your model code's (no ds_config key)")
    config: dict[str, object] = {
        "train_batch_size": ep.global_batch,
        "train_micro_batch_size_per_gpu": ep.micro_batch,
        "gradient_accumulation_steps": ep.microbatches // d,
        "zero_optimization": {"stage": 1 if ep.sharded else 0},
    }
    if ep.model is not None and ep.model.precision_bytes == 2:
        config["bf16"] = {"enabled": True}
    if ep.model is not None and ep.model.precision == "fp8":
        notes.append("fp8: the plan was priced with FP8 matrix products (Transformer Engine); ds_config has no FP8 "
                     "switch: it comes from Transformer Engine layers in your model code")
    if interval:
        config["activation_checkpointing"] = {
            "partition_activations": False, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "synchronize_checkpoint_boundary": False,
        }
    names, parts = partition(ep)
    if t > 1:
        topology = {"class": "PipeModelDataParallelTopology", "num_pp": p, "num_mp": t, "num_dp": d}
        notes.append(f"tensor parallelism t={t} comes from the model's own layers (e.g. Megatron-DeepSpeed's "
                     f"--tensor-model-parallel-size {t}); PipelineModule only places them (topology num_mp={t})")
    else:
        topology = {"class": "PipeDataParallelTopology", "num_pp": p, "num_dp": d}
    if interval:
        notes.append("activation_checkpoint_interval 1 checkpoints every entry of the layer list; pass "
                     "checkpointable_layers=[<your transformer layer class name>] so the embedding and head are not")
    pipeline = {
        "num_stages": p,
        "layers": names,
        "parts": parts,
        "stage_layers": [names[parts[i]:parts[i + 1]] for i in range(p)],
        "activation_checkpoint_interval": interval,
        "topology": topology,
        "world_size": ep.world_size,
        "how_to": PIPELINE_SNIPPET,
    }
    text = json.dumps(config, indent=2) + "\n"
    data = {
        "moe": moe,
        "ds_config": config,
        "pipeline": pipeline,
        "world_size": ep.world_size,
        "data_parallel": d,
        "tensor_parallel": t,
        "pipeline_parallel": p,
        "source": DEEPSPEED_SOURCE,
    }
    return Export("deepspeed", text, data, tuple(notes), {"pipeline.json": json.dumps(pipeline, indent=2) + "\n"})
