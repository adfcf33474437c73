"""``python -m piper model PRESET|config.json ...``: build a workload from a transformer.

Writes the workload with ``--out`` (checked by :func:`piper.load_problem`
first) and prints a summary; ``--json`` prints one JSON object instead;
``--list`` lists the presets and GPUs. Errors are :class:`UsageError`
subclasses: one line on stderr, exit status 2 (via ``run_main``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from piper.cli.common import (
    ArgumentParser,
    bounded_int,
    check_outputs,
    did_you_mean,
    float_arg,
    positive_int,
    rate_arg,
    run_main,
    size_arg,
)
from piper.core.errors import HardwareError, UsageError
from piper.core.limits import MAX_COUNT, MAX_MAGNITUDE, MAX_MODEL_LAYERS, MIN_FRACTION
from piper.frontend.config import PRECISIONS, TransformerConfig
from piper.frontend.context import CP_COMM_TYPES, SEARCH_SCHEMES
from piper.frontend.costs import RECOMPUTE_KINDS
from piper.frontend.hardware import (
    ACCELERATORS,
    ALIASES,
    NODE_TYPES,
    Hardware,
    hardware,
    hardware_from_file,
)
from piper.frontend.presets import PRESETS, load_model, model_config_path
from piper.frontend.summary import model_summary, render_summary
from piper.frontend.recompute import RECOMPUTE_MODULES, check_recompute_modules
from piper.frontend.workload import TOKEN_DISPATCHERS, TrainingSetup, build_workload, check_recompute_modules_for
from piper.io.workload import load_problem

__all__ = ["add_model_parser", "cmd_model", "main"]


_fraction = float_arg(f"a number in [{MIN_FRACTION:g}, 1]", (lambda v: MIN_FRACTION <= v <= 1,
                                                              f"must be in [{MIN_FRACTION:g}, 1]"))
_flops = float_arg("FLOP/s such as 312e12", (lambda v: math.isfinite(v) and 0 < v <= MAX_MAGNITUDE,
                                             f"must be > 0 and <= {MAX_MAGNITUDE:g} FLOP/s"))


def _reserve(text: str) -> float:
    """--memory-reserve: a size, or zero in any spelling a size has ("0", "0GB", "0.0 GiB": no reserve)."""
    return size_arg(text, zero=True)


def _capacity(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1.0 <= value <= 1e3:
        raise argparse.ArgumentTypeError(f"must be in [1, 1000], got {text}")
    return value


#: ``--recompute``'s help per command (:func:`add_model_arguments`): what the flag means there
RECOMPUTE_HELP = {
    "model": "recomputation for the reported hardware FLOPs (default full; the workload offers every kind)",
    "score": "recomputation of every transformer layer (default none)",
}


def add_model_arguments(p: argparse.ArgumentParser, recompute: str | None = "model") -> None:
    """The flags ``model``, ``score`` and ``plan`` share; ``recompute``: the command whose ``--recompute``
    this is (a key of :data:`RECOMPUTE_HELP`), None for none (``plan`` searches the recomputation)."""
    p.add_argument("model", nargs="?", help="a preset name (see --list) or a Hugging Face config.json")
    p.add_argument("--list", action="store_true", help="list the presets and GPUs, then exit")
    g = p.add_argument_group("training")
    g.add_argument("--micro-batch", type=positive_int, metavar="B", help="sequences per micro-batch (default: 1)")
    g.add_argument("--global-batch", type=positive_int, default=2048, metavar="SEQS", help="sequences per iteration (default 2048)")
    g.add_argument("--seq", type=positive_int, metavar="S", help="sequence length (default: the model's)")
    g.add_argument("--efficiency", type=_fraction, metavar="F",
                   help="e_max: fraction of peak a large matrix product reaches (default: the hardware's gemm_efficiency)")
    g.add_argument("--no-distributed-optimizer", action="store_true", help="keep optimizer state unsharded (memoryUsageB)")
    g.add_argument("--grad-bytes", type=int, choices=(2, 4), default=4,
                   help="bytes per gradient element (default 4: Megatron-LM reduces BF16 gradients in fp32)")
    if recompute is not None:
        g.add_argument("--recompute", choices=RECOMPUTE_KINDS, default="full" if recompute == "model" else "none",
                       help=RECOMPUTE_HELP[recompute])
    g.add_argument("--recompute-modules", nargs="+", action="extend", metavar="MODULE",
                   help="what selective recomputation recomputes, Megatron-Core's --recompute-modules: "
                        f"{', '.join(RECOMPUTE_MODULES)} (default core_attn; docs/frontend.md)")
    g.add_argument("--moe-capacity-factor", type=_capacity, metavar="C",
                   help="MoE models: plan for at most C x the balanced tokens per expert (memory and expert "
                        "products; Megatron's --moe-expert-capacity-factor); default: dropless, sized at the average")
    g.add_argument("--token-dispatcher", choices=TOKEN_DISPATCHERS,
                   help="MoE models: alltoall (default; NCCL all-to-all, k copies of a token) or flex (DeepEP / "
                        "HybridEP: one copy per destination device and node; needs expert tensor parallelism off)")
    g.add_argument("--precision", choices=PRECISIONS, help="bf16 (default) or fp8 (Transformer Engine: FP8 matrix products of the layers, BF16 elsewhere)")
    h = p.add_argument_group("hardware (--gpu/--node-type from the catalog, or --hardware FILE instead; then the single overrides)")
    h.add_argument("--gpu", help=f"accelerator (default a100-80gb; one of {', '.join([*ACCELERATORS, *ALIASES])})")
    h.add_argument("--node-type", metavar="NAME", help="node type (default: the GPU's DGX)")
    h.add_argument("--nodes", type=positive_int, default=1, help="number of nodes (default 1)")
    h.add_argument("--hardware", metavar="FILE.json", help="hardware numbers instead of --gpu/--node-type, which it refuses (keys of piper.frontend.Hardware; "
                        "'gpu' and 'node' name a catalog entry to start from)")
    h.add_argument("--peak-flops", type=_flops, metavar="FLOPS", help="peak dense FLOP/s per device, e.g. 312e12")
    h.add_argument("--memory", type=size_arg, metavar="SIZE", help="memory per device, e.g. 80GB")
    h.add_argument("--memory-reserve", type=_reserve, metavar="SIZE",
                   help="memory kept back per device for the CUDA context, NCCL and fragmentation "
                        "(default 7.5%% of the device's memory)")
    h.add_argument("--devices-per-node", type=positive_int, metavar="G", help="devices per node")
    h.add_argument("--nvlink-bandwidth", type=rate_arg, metavar="RATE", help="bytes/s per device inside a node, e.g. 300GB/s")
    h.add_argument("--network-bandwidth", type=rate_arg, metavar="RATE", help="bytes/s per device between nodes, e.g. 25GB/s")
    p.add_argument("--max-layers", type=positive_int, default=MAX_MODEL_LAYERS, metavar="L",
                   help=f"refuse models with more transformer layers (default {MAX_MODEL_LAYERS}: the workload and "
                        "its solve grow with the layers, about 5 KB and 2 ms per layer to build)")
    p.add_argument("--out", metavar="WORKLOAD.json", help="write the workload here")
    p.add_argument("--json", action="store_true", help="print one JSON object (the summary)")


def add_context_scheme_arguments(g: Any, *, plan: bool) -> None:
    """``--cp-comm-type`` and ``--hierarchical-context-parallel-sizes`` of ``score`` and ``plan``
    (``plan``: the scheme can be searched, ``any``, and the sizes fix c)."""
    g.add_argument("--cp-comm-type", choices=(*CP_COMM_TYPES, SEARCH_SCHEMES) if plan else CP_COMM_TYPES,
                   help="context parallelism's scheme on every layer at c > 1: p2p (ring attention), a2a (all-to-all "
                        "of the heads), allgather (Llama 3's all-gather of K, V) or a2a+p2p (with "
                        "--hierarchical-context-parallel-sizes)"
                        + ("; 'any' searches the default, a2a, allgather and a2a+p2p (one workload each, "
                           "a2a+p2p one per all-to-all size C1); a2a+p2p without its sizes searches C1" if plan else "")
                        + "; default: a2a on sliding-window layers, p2p elsewhere")
    # each level of the hierarchy holds at least 2 devices (C1 = 1 is the ring, C2 = 1 the all-to-all)
    g.add_argument("--hierarchical-context-parallel-sizes", type=bounded_int(2, MAX_COUNT), nargs=2, metavar=("C1", "C2"),
                   help="with --cp-comm-type a2a+p2p: all-to-all groups of C1 devices and a ring of C2 across them "
                        + ("(fixes the context-parallel size to C1 x C2)" if plan else "(C1 x C2 = --cp)"))


def add_model_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``model`` subcommand on an ``add_subparsers()`` object."""
    p = subparsers.add_parser("model", help="build a workload from a transformer preset or Hugging Face config.json")
    add_model_arguments(p)
    return p


def _hardware(args: argparse.Namespace) -> Hardware:
    overrides = dict(
        peak_flops=args.peak_flops,
        memory_bytes=args.memory,
        devices_per_node=args.devices_per_node,
        nvlink_bandwidth=args.nvlink_bandwidth,
        network_bandwidth=args.network_bandwidth,
    )
    if args.hardware:
        given = [flag for flag, value in (("--gpu", args.gpu), ("--node-type", args.node_type)) if value is not None]
        if given:  # the file replaces them: one of the two would be ignored
            raise UsageError(f"--hardware {args.hardware} replaces {' and '.join(given)}: name the GPU and node in "
                             "the file (\"gpu\", \"node\"), or drop --hardware")
        return hardware_from_file(args.hardware, **overrides)
    name = "a100-80gb" if args.gpu is None else args.gpu  # the default GPU
    gpu = str(name).strip().lower()
    if gpu not in ACCELERATORS and gpu not in ALIASES:
        known = [*ACCELERATORS, *ALIASES]
        raise HardwareError(f"unknown GPU {name!r}{did_you_mean(name, known)}; known GPUs: {', '.join(known)}")
    if args.node_type is not None and args.node_type.strip().lower() not in NODE_TYPES:
        raise HardwareError(f"unknown node type {args.node_type!r}{did_you_mean(args.node_type, NODE_TYPES)}; "
                            f"known: {', '.join(NODE_TYPES)}")
    return hardware(name, args.node_type, **overrides)


def listing_record() -> dict[str, Any]:
    """``--list --json``: the presets (their shape, units in the key names) and the catalog GPUs."""
    presets = {}
    for name, c in PRESETS.items():
        presets[name] = {"layers": c.layers, "hidden_size": c.hidden_size, "attention_heads": c.attention_heads,
                         "kv_heads": c.kv_heads, "ffn_hidden_size": c.ffn_hidden_size, "vocab_size": c.vocab_size,
                         "seq_length_tokens": c.seq_length, "ffn_kind": c.ffn_kind,
                         "moe": None if c.moe is None else {"experts": c.moe.experts, "top_k": c.moe.top_k,
                                                            "expert_ffn_hidden_size": c.moe.expert_ffn_hidden_size},
                         "mla": c.mla is not None}
    gpus = {name: {"peak_flops_bf16": acc.peak_flops, "memory_bytes": acc.memory_bytes,
                   "default_node": acc.default_node,
                   "aliases": [a for a, target in ALIASES.items() if target == name]}
            for name, acc in ACCELERATORS.items()}
    return {"presets": presets, "gpus": gpus}


def _listing() -> str:
    lines = ["presets:"]
    for name, c in PRESETS.items():
        lines.append(
            f"  {name:<16} l={c.layers:<4} h={c.hidden_size:<6} a={c.attention_heads:<4} kv={c.kv_heads:<4} "
            f"ffn={c.ffn_hidden_size:<6} V={c.vocab_size:<7} s={c.seq_length:<5} {c.ffn_kind}"
            + (f" moe E={c.moe.experts} k={c.moe.top_k} F={c.moe.expert_ffn_hidden_size}" if c.moe else "")
            + (" mla" if c.mla else "")
        )
    lines.append("GPUs:")
    for name, acc in ACCELERATORS.items():
        alias = [a for a, target in ALIASES.items() if target == name]
        lines.append(
            f"  {name:<14} {acc.peak_flops / 1e12:g} TFLOP/s bf16, {acc.memory_bytes / 1e9:g} GB, node {acc.default_node}"
            + (f" (alias {', '.join(alias)})" if alias else "")
        )
    return "\n".join(lines)


def model_from_args(args: argparse.Namespace, **setup_fields: Any) -> tuple[TransformerConfig, Hardware, TrainingSetup]:
    """The model, hardware and training setup that :func:`add_model_arguments`' flags name
    (shared by ``python -m piper model`` and ``python -m piper plan``)."""
    if not args.model:
        raise UsageError(f"{getattr(args, 'command', None) or 'model'}: give a preset name or a config.json (see --list)")
    spec = str(args.model)
    if model_config_path(spec) is None and spec.strip().lower() not in PRESETS:
        raise UsageError(f"unknown model preset {spec!r}{did_you_mean(spec, PRESETS)}; known presets: "
                         f"{', '.join(PRESETS)} (or give a Hugging Face config.json)")
    cfg = load_model(spec, seq_length=args.seq, warn=lambda line: print(f"piper: warning: {line}", file=sys.stderr))
    limit = getattr(args, "max_layers", MAX_MODEL_LAYERS)
    if cfg.layers > limit:
        raise UsageError(f"{cfg.name}: {cfg.layers} transformer layers, over the cap of {limit}: its workload would "
                         f"have about {cfg.layers + 3} nodes (about {cfg.layers * 5 / 1000:.3g} MB of JSON and "
                         f"{cfg.layers * 2 / 1000:.3g} s to build on one core, before any solve); "
                         f"--max-layers {cfg.layers} raises the cap")
    changes: dict[str, Any] = {}
    if args.seq is not None:
        changes["seq_length"] = args.seq
    if args.micro_batch is not None:
        changes["micro_batch"] = args.micro_batch
    if getattr(args, "precision", None) is not None:
        changes["precision"] = args.precision
    capacity = getattr(args, "moe_capacity_factor", None)
    if capacity is not None:
        if cfg.moe is None:
            raise UsageError(f"--moe-capacity-factor: {cfg.name} is not a mixture-of-experts model")
        changes["moe"] = replace(cfg.moe, capacity_factor=capacity)
    cfg = cfg.with_changes(**changes)
    dispatcher = getattr(args, "token_dispatcher", None)
    if dispatcher is not None:
        if cfg.moe is None:
            raise UsageError(f"--token-dispatcher: {cfg.name} is not a mixture-of-experts model")
        setup_fields = {"token_dispatcher": dispatcher, **setup_fields}
    if args.no_distributed_optimizer:
        # Megatron-LM's validate_args: --overlap-param-gather needs --use-distributed-optimizer; ZeRO-2's
        # sharded gradients are the distributed optimizer's
        for flag, field in (("--overlap-param-gather", "overlap_param_gather"), ("--shard-gradients", "shard_gradients")):
            if setup_fields.get(field):
                raise UsageError(f"{flag} needs the distributed optimizer: drop --no-distributed-optimizer or {flag}")
    modules = getattr(args, "recompute_modules", None)
    if modules is not None:
        modules = check_recompute_modules(modules, "--recompute-modules")
        check_recompute_modules_for(cfg, modules)
        setup_fields = {"recompute_modules": modules, **setup_fields}
    setup = TrainingSetup(
        nodes=args.nodes,
        global_batch=args.global_batch,
        efficiency=args.efficiency,
        distributed_optimizer=not args.no_distributed_optimizer,
        grad_bytes=args.grad_bytes,
        memory_reserve_bytes=args.memory_reserve,
        recompute=getattr(args, "recompute", "full"),
        **setup_fields,
    )
    hw = _hardware(args)
    if args.nodes * hw.devices_per_node > MAX_COUNT:
        raise UsageError(f"--nodes {args.nodes} x {hw.devices_per_node} devices per node = "
                         f"{args.nodes * hw.devices_per_node} devices, more than {MAX_COUNT}")
    return cfg, hw, setup


def check_model_outputs(args: argparse.Namespace, outputs: list[tuple[str, str | None]]) -> None:
    """The output paths of ``model`` / ``plan``, checked before any work (:func:`check_outputs`):
    never the model's config file or the hardware file."""
    config = model_config_path(str(args.model)) if args.model else None
    inputs = [("the model config", str(config) if config is not None else None),
              ("--hardware", getattr(args, "hardware", None))]
    check_outputs(outputs, inputs)


def write_workload(path: str, workload: dict[str, Any]) -> None:
    """Write a workload JSON file; a path that cannot be written is a UsageError (exit 2)."""
    try:
        Path(path).write_text(json.dumps(workload, indent=1) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def cmd_model(args: argparse.Namespace) -> int:
    if args.list:
        print(json.dumps(listing_record()) if getattr(args, "json", False) else _listing())
        return 0
    check_model_outputs(args, [("--out", args.out)])
    cfg, hw, setup = model_from_args(args)
    workload = build_workload(cfg, hw, setup)
    load_problem(workload, strict=True)  # the planner must accept what we write, every key known
    if args.out:
        write_workload(args.out, workload)
    summary = model_summary(cfg, hw, setup)
    summary["workload_file"] = args.out
    if args.json:
        print(json.dumps(summary))
        return 0
    print(render_summary(summary))
    print(f"workload      {'written to ' + args.out if args.out else 'not written (use --out FILE)'}: "
          f"{len(workload['nodes'])} nodes, k={workload['maxDevices']}, N={workload['mbsInBatch']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point (``python -m piper.cli.model``), same as ``python -m piper model``."""
    p = ArgumentParser(prog="python -m piper model", description="Build a Piper workload from a transformer.")
    add_model_arguments(p)
    return cmd_model(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(run_main(main, prog="piper"))
