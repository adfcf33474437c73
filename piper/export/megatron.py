"""A plan as Megatron-LM command-line arguments (``pretrain_gpt.py`` / ``pretrain_bert.py``).

Flag names as in NVIDIA/Megatron-LM ``megatron/training/arguments.py`` and Megatron-Core's
``megatron/core/transformer/pipeline_parallel_layer_layout.py`` (main branch, Megatron-Core
0.13+); see docs/export.md for what carries over and the refusal rules.

* sizes: ``--tensor-model-parallel-size t``, ``--pipeline-model-parallel-size p``; the
  data-parallel size d is not a flag: Megatron derives it from the world size d x t x p
  (a comment line says so);
* batch: ``--micro-batch-size b``, ``--global-batch-size N x b`` (Megatron runs
  N / d micro-batches per replica and iteration, as the plan does);
* the interleaved schedule (v chunks per device group): ``--num-layers-per-virtual-pipeline-stage n``
  when every chunk holds n transformer layers (the embedding in the first chunk, the head in
  the last), otherwise ``--pipeline-model-parallel-layout`` with all p v chunks in pipeline order
  (virtual stage j on pipeline rank j mod p, as Megatron-Core's layout reads it);
* layers: ``--num-layers l``; an uneven first / last stage with
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` when the
  middle stages are equal, otherwise (or when a stage holds only the embedding or only the
  head) ``--pipeline-model-parallel-layout`` ("E" embedding, "t" transformer layer, "L"
  loss = output layer, "|" between stages);
* recomputation: none; ``--recompute-granularity selective`` (core attention, [K22]);
  full on every layer as ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1``; full on some layers as ``--recompute-method block
  --recompute-num-layers n`` (the first n layers of every stage) when every stage
  recomputes min(n, its layers);
* ``--sequence-parallel`` when t > 1 and the TMPCs use it; ``--use-distributed-optimizer``
  when the chosen TMPCs shard state (``memoryUsageShardedB`` > 0);
* model shape from the workload's ``model`` record (hidden size, FFN, heads, query groups,
  sequence length, SwiGLU, RMSNorm, biases, rotary positions, untied embeddings, bf16).
"""

from __future__ import annotations

import shlex

from piper.export.common import Export, ExportPlan, StageSpec, format_counts, refuse

__all__ = ["export_megatron", "layer_args", "recompute_args", "MEGATRON_SOURCE"]

#: what the flags were checked against (docs/export.md, "Versions")
MEGATRON_SOURCE = "NVIDIA/Megatron-LM main, Megatron-Core 0.13+"


def _layout(ep: ExportPlan) -> str:
    """Megatron-Core's --pipeline-model-parallel-layout string for the plan's stages (all chunks
    of an interleaved plan, in pipeline order)."""
    parts = []
    last = len(ep.stages)
    for st in ep.stages:
        n = st.n_layers
        tok = "" if n == 0 else ("t" if n == 1 else f"t*{n}")
        parts.append(("E" if st.index == 1 else "") + tok + ("L" if st.index == last else ""))
    return "|".join(parts)


def layer_args(ep: ExportPlan) -> tuple[list[str], str | None]:
    """The layer-split arguments and the layout string (None when no layout is needed)."""
    counts = [st.n_layers for st in ep.stages]
    if ep.interleaved:
        if len(set(counts)) == 1 and ep.stages[0].pre and ep.stages[-1].post:
            return ["--num-layers-per-virtual-pipeline-stage", str(counts[0])], None
        layout = _layout(ep)
        return ["--pipeline-model-parallel-layout", layout], layout
    p = len(counts)
    if p == 1 or len(set(counts)) == 1:
        return [], None
    if min(counts) == 0:
        layout = _layout(ep)
        return ["--pipeline-model-parallel-layout", layout], layout
    if p == 2:
        # the rest of the layers go to the last stage
        return ["--decoder-first-pipeline-num-layers", str(counts[0])], None
    middle = set(counts[1:-1])
    if len(middle) == 1:
        m = middle.pop()
        out: list[str] = []
        if counts[0] != m:
            out += ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if counts[-1] != m:
            out += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
        return out, None
    layout = _layout(ep)
    return ["--pipeline-model-parallel-layout", layout], layout


def recompute_args(ep: ExportPlan, notes: list[str]) -> list[str]:
    """--recompute-* arguments for the chosen TMPCs, or :class:`ExportError` (rule E6)."""
    kinds = {r for st in ep.stages for r in st.recompute}
    if not kinds or kinds == {"none"}:
        return []
    if kinds == {"selective"}:
        return ["--recompute-granularity", "selective"]
    if kinds == {"full"}:
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if kinds == {"full", "none"}:
        n = max(st.count("full") for st in ep.stages)
        for st in ep.stages:
            if st.count("full") != min(n, st.n_layers):
                other = next(s for s in ep.stages if s.count("full") == n)
                raise refuse(
                    "megatron", "E6",
                    f"stage {st.index} recomputes {st.count('full')} of its {st.n_layers} transformer layers, stage "
                    f"{other.index} {n} of {other.n_layers}; --recompute-num-layers (method block) is one number "
                    "for every stage", recompute=True, stage=st.index)
        for st in ep.stages:
            want = tuple("full" if k < n else "none" for k in range(st.n_layers))
            if st.recompute != want:
                notes.append(f"stage {st.index}: Megatron's block method recomputes the stage's first {min(n, st.n_layers)} "
                             "layers; the plan chose other layers of the stage (the same count: the same time and "
                             "memory when the layers are identical, as in workloads of the model front end)")
        return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(n)]
    mixed = [st for st in ep.stages if "selective" in st.recompute]
    where = "; ".join(f"stage {st.index}: {_describe(st)}" for st in mixed[:2])
    raise refuse("megatron", "E6",
                 f"the plan mixes selective recomputation with other kinds ({where}); --recompute-granularity is one "
                 "setting for every layer (only full recomputation can be limited to n layers per stage, "
                 "--recompute-method block)", recompute=True, stage=mixed[0].index)


def _describe(st: StageSpec) -> str:
    """'2 selective + 8 none of 10 layers'."""
    kinds = [k for k in ("full", "selective", "none") if st.count(k)]
    return " + ".join(f"{st.count(k)} {k}" for k in kinds) + f" of {st.n_layers} layers"


def _model_args(ep: ExportPlan, notes: list[str]) -> list[str]:
    m = ep.model
    if m is None:
        notes.append("the workload records no model shape (a profiled workload): add --hidden-size, "
                     "--num-attention-heads, --seq-length, ... yourself")
        return []
    out = ["--hidden-size", str(m.hidden_size), "--ffn-hidden-size", str(m.ffn_hidden_size),
           "--num-attention-heads", str(m.attention_heads)]
    if m.kv_heads != m.attention_heads:
        out += ["--group-query-attention", "--num-query-groups", str(m.kv_heads)]
    out += ["--seq-length", str(m.seq_length), "--max-position-embeddings", str(m.seq_length)]
    if m.ffn_kind == "swiglu":
        out.append("--swiglu")
    if m.norm == "rmsnorm":
        out += ["--normalization", "RMSNorm"]
    if not m.linear_bias:
        out.append("--disable-bias-linear")
    if not m.learned_positions:
        out += ["--position-embedding-type", "rope"]
    if not m.tied_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if m.precision_bytes == 2:
        out.append("--bf16")
        notes.append("--bf16: the workload's costs are for 2-byte weights and activations (use --fp16 with loss "
                     "scaling instead if you train in fp16; the memory model is the same)")
    elif m.precision_bytes != 4:
        notes.append(f"the workload's {m.precision_bytes}-byte precision has no Megatron switch here: set it yourself")
    notes.append(f"vocabulary of {m.vocab_size} tokens: it comes from your tokenizer (--vocab-size only with the "
                 "NullTokenizer), padded by Megatron to a multiple of --make-vocab-size-divisible-by x t")
    return out


def export_megatron(ep: ExportPlan) -> Export:
    """Megatron-LM arguments for ``ep`` (see the module docstring); :class:`ExportError` when
    the plan's recomputation has no Megatron setting (rule E6)."""
    d, t = ep.uniform()
    p = ep.pipeline
    notes = list(ep.notes)
    args = ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p),
            "--micro-batch-size", str(ep.micro_batch), "--global-batch-size", str(ep.global_batch),
            "--num-layers", str(ep.num_layers)]
    split, layout = layer_args(ep)
    args += split
    if t > 1 and all(f for st in ep.stages for f in st.sequence_parallel):
        args.append("--sequence-parallel")
    args += recompute_args(ep, notes)
    if ep.sharded:
        args.append("--use-distributed-optimizer")
    args += _model_args(ep, notes)
    counts = [st.n_layers for st in ep.stages]
    unit = f"chunk (interleaved schedule, {ep.virtual_stages} virtual stages per pipeline rank)" if ep.interleaved \
        else "stage"
    header = [
        f"# Megatron-LM arguments from a Piper plan; flags of {MEGATRON_SOURCE} (docs/export.md)",
        f"# data-parallel size {d} is implied: launch on world size {ep.world_size} = d {d} x t {t} x p {p} GPUs "
        f"(Megatron derives d = world size / (t x p))",
        f"# transformer layers per {unit}: {format_counts(counts)}"
        + (" (embedding in the first stage, output layer in the last)" if p > 1 else ""),
        f"# {ep.microbatches // d} micro-batches of {ep.micro_batch} per replica and iteration "
        f"(N = {ep.microbatches} micro-batches per batch)",
    ]
    header += [f"# note: {n}" for n in notes]
    pairs: list[list[str]] = []
    for tok in args:
        if tok.startswith("--") or not pairs:
            pairs.append([tok])
        else:
            pairs[-1].append(tok)
    lines = [" ".join(shlex.quote(x) for x in pair) for pair in pairs]
    text = "\n".join(header + [line + " \\" for line in lines[:-1]] + lines[-1:]) + "\n"
    data = {
        "args": args,
        "command_line": " ".join(shlex.quote(a) for a in args),
        "world_size": ep.world_size,
        "data_parallel": d,
        "tensor_parallel": t,
        "pipeline_parallel": p,
        "micro_batch": ep.micro_batch,
        "global_batch": ep.global_batch,
        "stage_layers": counts,
        "virtual_stages": ep.virtual_stages,
        "layout": layout,
        "source": MEGATRON_SOURCE,
    }
    return Export("megatron", text, data, tuple(notes), {})
