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
* recomputation: none; ``--recompute-granularity selective`` (core attention, [K22]; with
  ``--recompute-modules`` the workload's ``recomputeModules`` when they are not that default);
  full on every layer as ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1``; full on some layers as ``--recompute-method block
  --recompute-num-layers n`` (the first n layers of every stage) when every stage
  recomputes min(n, its layers);
* ``--sequence-parallel`` when t > 1 and the TMPCs use it; ``--use-distributed-optimizer``
  when the chosen TMPCs shard state (``memoryUsageShardedB`` > 0);
* model shape from the workload's ``model`` record (hidden size, FFN, heads, query groups,
  sequence length, SwiGLU, RMSNorm, biases, rotary positions, untied embeddings, bf16, and
  :data:`FP8_ARGS` for an FP8 workload);
  ``--kv-channels`` for a head width other than h / a;
* mixture of experts (issue 31; :func:`moe_args`): ``--num-experts``, ``--moe-router-topk``,
  ``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq``
  (``"([0]*k+[1]*m)"`` or an explicit 0/1 list when some layers are dense),
  ``--moe-router-score-function``, ``--moe-expert-capacity-factor`` (when not dropless),
  ``--expert-model-parallel-size e`` and ``--expert-tensor-parallel-size e_t`` of the plan's MoE
  TMPCs (one layout for the model: rule E9), ``--moe-token-dispatcher-type`` (``alltoall``, or
  ``flex`` with ``--moe-flex-dispatcher-backend hybridep`` when the workload was priced for it) and
  ``--moe-grouped-gemm`` (the kernels the cost model prices; with ``--bf16`` only, as Megatron-LM
  asserts); MLA: ``--multi-latent-attention``,
  ``--q-lora-rank``, ``--kv-lora-rank``, ``--qk-head-dim`` (d_nope), ``--qk-pos-emb-head-dim``
  (d_rope), ``--v-head-dim``;
* sliding-window attention (:func:`window_args`): ``--window-size w,0`` and
  ``--window-attn-skip-freq`` (N, or the 0/1 list of windowed layers).
"""

from __future__ import annotations

import shlex

from piper.export.common import Export, ExportPlan, StageSpec, format_counts, moe_flags, refuse

__all__ = ["MEGATRON_SOURCE", "export_megatron", "layer_args", "moe_args", "moe_layer_pattern", "recompute_args",
           "window_args"]

#: what the flags were checked against (docs/export.md, "Versions")
MEGATRON_SOURCE = "NVIDIA/Megatron-LM main, Megatron-Core 0.13+"

#: the front end's context-parallel schemes (piper.frontend.context.CP_COMM_TYPES) -> ``--cp-comm-type``'s
#: values: Megatron-Core hands the string to Transformer Engine, whose attention takes "all_gather"
#: (TransformerConfig.cp_comm_type: "p2p", "all_gather", "a2a" or "a2a+p2p")
CP_COMM_TYPE_FLAGS = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather", "a2a+p2p": "a2a+p2p"}

#: FP8 as the costs price it (piper/frontend/workload.py FP8_AMAX_HISTORY): Transformer Engine's
#: DelayedScaling defaults (HYBRID format: E4M3 forward, E5M2 gradients; an amax history of 1,024
#: steps reduced by max), which Megatron-LM's own defaults (history 1, most_recent) differ from
FP8_ARGS = ("--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024",
            "--fp8-amax-compute-algo", "max")


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
        from piper.frontend.recompute import DEFAULT_RECOMPUTE_MODULES  # the workload's vocabulary

        modules = ep.model.recompute_modules if ep.model is not None else DEFAULT_RECOMPUTE_MODULES
        if modules == DEFAULT_RECOMPUTE_MODULES:
            return ["--recompute-granularity", "selective"]
        return ["--recompute-granularity", "selective", "--recompute-modules", *modules]
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
        if m.precision == "fp8":
            out += list(FP8_ARGS)
            notes.append("fp8: the layers' matrix products in FP8 with Transformer Engine's delayed scaling, as "
                         "priced; --fp8-recipe tensorwise (current scaling) runs the same products")
    elif m.precision_bytes != 4:
        notes.append(f"the workload's {m.precision_bytes}-byte precision has no Megatron switch here: set it yourself")
    if m.precision == "fp8" and m.precision_bytes != 2:
        notes.append(f"fp8 on a {m.precision_bytes}-byte model: Megatron-LM's FP8 runs with --bf16 or --fp16; the FP8 "
                     "flags are not written")
    notes.append(f"vocabulary of {m.vocab_size} tokens: it comes from your tokenizer (--vocab-size only with the "
                 "NullTokenizer), padded by Megatron to a multiple of --make-vocab-size-divisible-by x t")
    return out


def moe_layer_pattern(layers: int, first_dense: int, freq: int, offset: int) -> str:
    """``--moe-layer-freq``'s value: 1 for an MoE layer, 0 for a dense one (:func:`~piper.export.common.moe_flags`);
    a Python expression Megatron evaluates."""
    flags = moe_flags(layers, first_dense, freq, offset)
    dense_head = next((i for i, f in enumerate(flags) if f), layers)
    if all(flags[dense_head:]):
        return f"([0]*{dense_head}+[1]*{layers - dense_head})" if dense_head else f"([1]*{layers})"
    return "[" + ",".join(map(str, flags)) + "]"


def window_args(ep: ExportPlan, notes: list[str]) -> list[str]:
    """Sliding-window attention: ``--window-size w,0`` and, when some layers attend to the whole
    prefix, ``--window-attn-skip-freq`` (Megatron-Core's ``is_layer_window_attention``: 1-based
    layer n is windowed when n % N != 0 for an integer N, or when the list's n-th entry is 1);
    [] when every layer attends to the whole causal prefix."""
    m = ep.model
    if m is None or m.sliding_window is None:
        return []
    windowed = set(m.sliding_window_layers)
    flags = [1 if i in windowed else 0 for i in range(m.layers)]
    out = ["--window-size", f"{m.sliding_window},0"]
    if not all(flags):
        every = next((n for n in range(2, m.layers + 1)
                      if flags == [1 if (i + 1) % n else 0 for i in range(m.layers)]), None)
        out += ["--window-attn-skip-freq", str(every) if every is not None else "[" + ",".join(map(str, flags)) + "]"]
    notes.append(f"sliding window: {m.sliding_window} tokens on {len(windowed)} of {m.layers} layers, written as "
                 f"Megatron-Bridge's GPT-OSS recipe writes the Hugging Face sliding_window (left = w, right = 0)")
    return out


def moe_args(ep: ExportPlan, notes: list[str]) -> list[str]:
    """The mixture-of-experts and MLA flags (module docstring); [] for a dense model."""
    m = ep.model
    out: list[str] = []
    if m is None:
        return out
    if m.attention_head_dim is not None:
        out += ["--kv-channels", str(m.attention_head_dim)]
    if m.mla is not None:
        mla = m.mla
        out += ["--multi-latent-attention"]
        if mla.get("qLoraRank"):
            out += ["--q-lora-rank", str(mla["qLoraRank"])]
        out += ["--kv-lora-rank", str(mla["kvLoraRank"]), "--qk-head-dim", str(mla["qkNopeHeadDim"]),
                "--qk-pos-emb-head-dim", str(mla["qkRopeHeadDim"]), "--v-head-dim", str(mla["vHeadDim"])]
    if m.moe is None:
        return out
    moe = m.moe
    e, et = ep.expert_layout
    out += ["--num-experts", str(moe["experts"]), "--moe-router-topk", str(moe["topK"]),
            "--moe-ffn-hidden-size", str(moe["expertFfnHiddenSize"])]
    if moe.get("sharedFfnHiddenSize"):
        out += ["--moe-shared-expert-intermediate-size", str(moe["sharedFfnHiddenSize"])]
    pattern = moe_layer_pattern(m.layers, moe.get("firstDenseLayers") or 0, moe["layerFreq"], moe.get("layerOffset") or 0)
    if pattern != f"([1]*{m.layers})":
        out += ["--moe-layer-freq", pattern]
    out += ["--moe-router-score-function", str(moe["routerScore"])]
    if moe.get("capacityFactor") is not None:
        out += ["--moe-expert-capacity-factor", f"{moe['capacityFactor']:g}", "--moe-pad-expert-input-to-capacity"]
    out += ["--expert-model-parallel-size", str(e), "--expert-tensor-parallel-size", str(et),
            "--moe-token-dispatcher-type", m.token_dispatcher]
    if m.precision_bytes == 2:
        out.append("--moe-grouped-gemm")
    else:  # megatron/training/arguments.py: --moe-grouped-gemm asserts --bf16
        notes.append(f"no --moe-grouped-gemm: Megatron-LM runs grouped GEMMs only with --bf16, and this workload "
                     f"is {m.precision_bytes}-byte; its experts then run one by one, slower than the costs' grouped "
                     "products")
    if m.token_dispatcher == "flex":
        # the one-copy-per-device-and-node dispatch the costs priced (piper/frontend/moe_costs.py)
        out += ["--moe-flex-dispatcher-backend", "hybridep"]
    notes.append(f"experts: e = {e} x e_t = {et} devices per expert group (rule 6: it divides d x t); the cost model "
                 "assumes balanced routing (set the load-balancing loss / bias yourself)")
    return out


def export_megatron(ep: ExportPlan) -> Export:
    """Megatron-LM arguments for ``ep`` (see the module docstring); :class:`ExportError` when
    the plan's recomputation has no Megatron setting (rule E6)."""
    d, _width = ep.uniform()
    c = ep.context_parallel
    t = ep.tensor_parallel()  # the stage's width is t x c (docs/problem.md §11)
    p = ep.pipeline
    notes = list(ep.notes)
    args = ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p),
            "--micro-batch-size", str(ep.micro_batch), "--global-batch-size", str(ep.global_batch),
            "--num-layers", str(ep.num_layers)]
    if c > 1:
        # the schemes the workload's costs model (piper/frontend/context.py): one for every layer, or
        # Megatron-Core's per-layer list
        types = [CP_COMM_TYPE_FLAGS[ep.model.cp_comm_type_of(i)] for i in range(ep.num_layers)] \
            if ep.model is not None else ["p2p"]
        args += ["--context-parallel-size", str(c), "--cp-comm-type", *(types[:1] if len(set(types)) == 1 else types)]
        if "a2a+p2p" in types and ep.model is not None and ep.model.cp_a2a_size is not None:
            c1 = ep.model.cp_a2a_size
            args += ["--hierarchical-context-parallel-sizes", str(c1), str(c // c1)]
    split, layout = layer_args(ep)
    args += split
    if t > 1 and all(f for st in ep.stages for f in st.sequence_parallel):
        args.append("--sequence-parallel")
    args += recompute_args(ep, notes)
    if ep.sharded:
        args.append("--use-distributed-optimizer")
    args += _model_args(ep, notes)
    args += moe_args(ep, notes)
    args += window_args(ep, notes)
    counts = [st.n_layers for st in ep.stages]
    unit = f"chunk (interleaved schedule, {ep.virtual_stages} virtual stages per pipeline rank)" if ep.interleaved \
        else "stage"
    header = [
        f"# Megatron-LM arguments from a Piper plan; flags of {MEGATRON_SOURCE} (docs/export.md)",
        f"# data-parallel size {d} is implied: launch on world size {ep.world_size} = d {d} x t {t}"
        + (f" x c {c}" if c > 1 else "") + f" x p {p} GPUs (Megatron derives d = world size / (t x "
        + ("c x " if c > 1 else "") + "p))",
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
        "context_parallel": c,
        "pipeline_parallel": p,
        "micro_batch": ep.micro_batch,
        "global_batch": ep.global_batch,
        "stage_layers": counts,
        "virtual_stages": ep.virtual_stages,
        "layout": layout,
        "expert_parallel": ep.expert_layout[0],
        "expert_tensor_parallel": ep.expert_layout[1],
        "source": MEGATRON_SOURCE,
    }
    return Export("megatron", text, data, tuple(notes), {})
