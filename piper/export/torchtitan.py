"""A plan as the ``[parallelism]``, ``[training]`` and ``[activation_checkpoint]`` sections of
a torchtitan TOML job config.

Keys as in pytorch/torchtitan ``torchtitan/config/job_config.py`` (dataclasses
``Parallelism``, ``Training``, ``ActivationCheckpoint``); see docs/export.md.

* ``tensor_parallel_degree`` t, ``pipeline_parallel_degree`` p, ``pipeline_parallel_schedule``
  "1F1B", or "Interleaved1F1B" for an interleaved plan (torchtitan then places model part j on
  pipeline rank j mod p, the plan's chunk order; ``module_fqns_per_model_part`` lists the p v
  chunks);
* data parallelism: ``data_parallel_replicate_degree`` d (DDP) when the plan has d > 1 on one
  axis only (t = p = 1) and keeps its state replicated; otherwise ``data_parallel_shard_degree``
  d (FSDP): torchtitan runs DDP only as 1-D parallelism, and its sharding also shards weights
  and gradients (a note says so: the plan assumed ZeRO-1 or no sharding);
* the split: ``module_fqns_per_model_part`` (torchtitan's Llama module names:
  ``tok_embeddings``, ``layers.<i>``, ``norm``, ``output``), and the older
  ``pipeline_parallel_split_points`` in a comment;
* micro-batches: ``pipeline_parallel_microbatch_size`` b, ``[training] local_batch_size``
  b x N / d (all micro-batches of one replica), ``global_batch_size`` b x N, ``seq_len``;
* ``[activation_checkpoint] mode``: "none", "full", or "selective" with
  ``selective_ac_option`` n (every n-th layer of a stage) when stage i recomputes
  floor(l_i / n) of its l_i layers. Megatron-style selective recomputation (core attention)
  has no counterpart (torchtitan's "op" option saves chosen op outputs instead).
"""

from __future__ import annotations

import json

from piper.export.common import Export, ExportPlan, format_counts, refuse, selective_words

__all__ = ["TORCHTITAN_SOURCE", "export_torchtitan", "module_fqns", "split_points"]

#: what the keys were checked against (docs/export.md, "Versions")
TORCHTITAN_SOURCE = "pytorch/torchtitan main, torchtitan/config/job_config.py"


def module_fqns(ep: ExportPlan) -> list[list[str]]:
    """Module names per pipeline stage (per chunk, for an interleaved plan), torchtitan's Llama naming."""
    out = []
    for st in ep.stages:
        names = (["tok_embeddings"] if st.index == 1 else []) + [f"layers.{i}" for i in st.layers]
        if st.index == len(ep.stages):
            names += ["norm", "output"]
        out.append(names)
    return out


def split_points(ep: ExportPlan) -> list[str] | None:
    """``pipeline_parallel_split_points`` (the module each stage after the first starts with),
    or None when a stage after the first holds no transformer layer (a head-only stage)."""
    out = []
    for st in ep.stages[1:]:
        if not st.layers:
            return None
        out.append(f"layers.{st.layers[0]}")
    return out


def _activation_checkpoint(ep: ExportPlan, notes: list[str]) -> tuple[str, str | None]:
    kinds = {r for st in ep.stages for r in st.recompute}
    if "selective" in kinds:
        st = next(s for s in ep.stages if "selective" in s.recompute)
        raise refuse("torchtitan", "E4", f"stage {st.index} uses selective recomputation of {selective_words(ep)}, which "
                     "torchtitan's [activation_checkpoint] cannot express (mode 'selective' is every n-th layer or "
                     "per-op saving)", recompute=True, stage=st.index)
    if kinds <= {"none"}:
        return "none", None
    if kinds == {"full"}:
        return "full", None
    longest = max(st.n_layers for st in ep.stages)
    fits = [n for n in range(2, longest + 1) if all(st.count("full") == st.n_layers // n for st in ep.stages)]
    if fits:
        def every(n: int, size: int) -> tuple[str, ...]:
            return tuple("full" if (k + 1) % n == 0 else "none" for k in range(size))

        exact = [n for n in fits if all(st.recompute == every(n, st.n_layers) for st in ep.stages)]
        n = exact[0] if exact else fits[0]
        for st in ep.stages:
            if st.recompute != every(n, st.n_layers):
                notes.append(f"stage {st.index}: torchtitan recomputes every {n}th layer of the stage; the plan "
                             "chose other layers (the same count: the same time and memory when the layers are "
                             "identical, as in workloads of the model front end)")
        return "selective", str(n)
    counts = ", ".join(f"stage {st.index}: {st.count('full')} of {st.n_layers}" for st in ep.stages)
    raise refuse("torchtitan", "E6", f"the stages recompute different shares of their layers ({counts}); "
                 "selective_ac_option n recomputes floor(l_i / n) layers of every stage, for no n here",
                 recompute=True, stage=ep.stages[0].index)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v)


def export_torchtitan(ep: ExportPlan) -> Export:
    """The TOML sections (``text``); :class:`ExportError` for tensor parallelism without
    sequence parallelism and for recomputation torchtitan cannot express (rules E4, E6)."""
    d, _width = ep.uniform()
    c = ep.context_parallel
    t = ep.tensor_parallel()  # the stage's width is t x c (docs/problem.md §11)
    p = ep.pipeline
    notes = list(ep.notes)
    if t > 1 and not all(f for st in ep.stages for f in st.sequence_parallel):
        st = next(s for s in ep.stages if not all(s.sequence_parallel))
        raise refuse("torchtitan", "E4", f"stage {st.index} runs tensor parallelism t={t} without sequence parallelism "
                     "(TMPCs without '+sp'); torchtitan's tensor-parallel plan always shards the norms along the "
                     "sequence", stage=st.index)
    mode, option = _activation_checkpoint(ep, notes)
    if ep.model is not None and ep.model.precision == "fp8":
        notes.append("fp8: the plan was priced with FP8 matrix products (Transformer Engine's delayed scaling); "
                     "torchtitan's float8 training (torchao, its own scaling) is not written here: set it yourself")
    if d > 1 and t == 1 and p == 1 and not ep.sharded:
        replicate, shard = d, 1
    else:
        replicate, shard = 1, d
        if d > 1:
            why = ("the plan shards the optimizer state only (ZeRO-1)" if ep.sharded else
                   "the plan keeps weights and optimizer state replicated (torchtitan runs DDP only without "
                   "tensor or pipeline parallelism)")
            notes.append(f"data parallelism d={d} runs as FSDP (data_parallel_shard_degree): it shards weights, "
                         f"gradients and optimizer state; {why}, so memory per GPU is at most the plan's and the "
                         "data-parallel traffic is larger (weights are all-gathered)")
    parallelism: dict[str, object] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": t,
        "pipeline_parallel_degree": p,
    }
    if c > 1:
        types = [ep.model.cp_comm_type_of(i) if ep.model is not None else "p2p" for i in range(ep.num_layers)]
        a2a = [i for i, k in enumerate(types) if k in ("a2a", "a2a+p2p")]
        if a2a:
            first = a2a[0]
            raise refuse("torchtitan", "E4", f"the plan's context parallelism c={c} runs an all-to-all scheme "
                         f"(--cp-comm-type {types[first]}) on {len(a2a)} of {ep.num_layers} layers (first: layer "
                         f"{first}, 0-based); torchtitan's context parallelism passes K and V around a ring or "
                         "all-gathers them; re-plan with --cp-comm-type allgather"
                         + ("" if ep.model is not None and ep.model.sliding_window is not None else " or p2p")
                         + ", or export to megatron")
        if len(set(types)) > 1:
            raise refuse("torchtitan", "E4", f"the plan's context parallelism c={c} mixes schemes over its layers "
                         f"({', '.join(sorted(set(types)))}); torchtitan's context_parallel_rotate_method is one "
                         "setting for the model; re-plan with one --cp-comm-type")
        parallelism["context_parallel_degree"] = c
        # PyTorch's context parallelism: "allgather" gathers K and V (Llama 3's scheme), "alltoall" passes
        # the shards around the ring (the p2p ring's exchange)
        parallelism["context_parallel_rotate_method"] = "allgather" if types[0] == "allgather" else "alltoall"
        notes.append(f"context_parallel_degree {c}, context_parallel_rotate_method "
                     f"{parallelism['context_parallel_rotate_method']}: the plan's costs are those of Megatron-Core's "
                     f"{types[0]} scheme (piper/frontend/context.py); torchtitan's context parallelism (PyTorch's "
                     "experimental context_parallel) may overlap differently")
    e, et = ep.expert_layout
    if ep.model is not None and ep.model.moe is not None:
        # torchtitan's MoE models (DeepSeek-V3, Qwen3): [parallelism] expert_parallel_degree and
        # expert_tensor_parallel_degree (1 or t); EP borrows its devices from data (and tensor) parallelism
        parallelism["expert_parallel_degree"] = e
        parallelism["expert_tensor_parallel_degree"] = et
        notes.append(f"experts: expert_parallel_degree {e}, expert_tensor_parallel_degree {et}; the [model] flavor "
                     f"({ep.model.moe['experts']} experts, top-{ep.model.moe['topK']}) is yours to pick")
        if ep.model.token_dispatcher == "flex":
            # DeepEP's dispatch (one copy per destination device and node), what the costs priced
            parallelism["expert_parallel_comm_backend"] = "deepep"
    if ep.model is not None and ep.model.sliding_window is not None:
        notes.append(f"sliding window: {ep.model.sliding_window} tokens on {len(ep.model.sliding_window_layers)} of "
                     f"{ep.model.layers} layers, as priced; torchtitan takes it from the model's definition "
                     "(the [model] flavor), not from a job setting")
    if p > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if ep.interleaved else "1F1B"
        parallelism["pipeline_parallel_microbatch_size"] = ep.micro_batch
        parallelism["module_fqns_per_model_part"] = module_fqns(ep)
    training = {
        "local_batch_size": ep.micro_batch * (ep.microbatches // d),
        "global_batch_size": ep.global_batch,
    }
    if ep.model is not None:
        training["seq_len"] = ep.model.seq_length
        if ep.model.ffn_kind != "swiglu" or ep.model.learned_positions:
            notes.append(f"{ep.model.name} is a GPT-style model (GELU MLP / learned positions); torchtitan ships Llama-"
                         "style models: the module names assume tok_embeddings, layers.<i>, norm, output")
    else:
        notes.append("the workload records no model shape: set [training] seq_len and [model] yourself")
    ac: dict[str, object] = {"mode": mode}
    if option is not None:
        ac["selective_ac_option"] = option
    points = split_points(ep)
    lines = [f"# torchtitan job config sections from a Piper plan; keys of {TORCHTITAN_SOURCE} (docs/export.md)",
             f"# world size {ep.world_size} = d {d} x t {t} x p {p} GPUs; transformer layers per "
             + ("chunk" if ep.interleaved else "stage") + ": " + format_counts([st.n_layers for st in ep.stages])]
    lines += [f"# note: {n}" for n in notes]
    for section, values in (("parallelism", parallelism), ("training", training), ("activation_checkpoint", ac)):
        lines.append("")
        lines.append(f"[{section}]")
        for k, v in values.items():
            lines.append(f"{k} = {_toml_value(v)}")
        if section == "parallelism" and p > 1:
            if points is not None:
                lines.append("# torchtitan releases without module_fqns_per_model_part: instead of it,")
                lines.append(f"# pipeline_parallel_split_points = {_toml_value(points)}")
            else:
                lines.append("# (no pipeline_parallel_split_points equivalent: the last stage holds only the head)")
    text = "\n".join(lines) + "\n"
    data = {
        "parallelism": parallelism,
        "training": training,
        "activation_checkpoint": ac,
        "pipeline_parallel_split_points": points,
        "world_size": ep.world_size,
        "data_parallel": d,
        "tensor_parallel": t,
        "context_parallel": c,
        "pipeline_parallel": p,
        "source": TORCHTITAN_SOURCE,
    }
    return Export("torchtitan", text, data, tuple(notes), {})
