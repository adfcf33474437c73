"""``python -m piper score MODEL --gpu G --nodes N --tp T [--cp C [--cp-comm-type p2p|a2a|allgather|a2a+p2p [--hierarchical-context-parallel-sizes C1 C2]]] --pp P [--dp D] [--vp V] --micro-batch B
--global-batch GB [--seq S] --recompute none|selective|full [--recompute-modules M ...] [--sequence-parallel]
[--no-distributed-optimizer] [--precision bf16|fp8] [--ep E] [--etp ET] [--account-for-embedding-in-pipeline-split]
[--account-for-loss-in-pipeline-split] [--json]``: the layout a user runs today (their Megatron-LM command line)
scored by the one evaluator.

The scoring is :func:`piper.frontend.score.score_layout` (layers split evenly, Megatron's rule, with the
embedding and the loss counted as a layer each under Megatron's two ``--account-for-...`` flags:
:func:`piper.frontend.score.megatron_split`; ``--vp V`` the interleaved schedule, docs/problem.md §9). Prints the iteration time, tokens/s
(all GPUs and per GPU), model TFLOP/s per GPU and MFU (Megatron-LM's FLOP count, full attention;
the causal-half variant too), memory per GPU against the limit, and the bottleneck; ``--json``
prints one JSON object. An impossible layout is one line naming the flag (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from piper.cli.common import positive_int, write_plan
from piper.cli.model import (
    add_context_scheme_arguments,
    add_model_arguments,
    check_model_outputs,
    model_from_args,
    write_workload,
)
from piper.core.errors import UsageError
from piper.core.json_values import jsonable
from piper.frontend.caveats import prediction_caveats, runner_up_form_check
from piper.frontend.context import describe_comm_types
from piper.frontend.metrics import memory_breakdown_text
from piper.frontend.moe_costs import moe_micro_batch_caveat, runner_up_moe_hardware
from piper.frontend.score import Layout, megatron_split, score_layout

__all__ = ["add_score_parser", "cmd_score"]


def add_score_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("score", help="score a Megatron-LM layout (t, p, d, v, recomputation) of a model")
    add_model_arguments(p, recompute="score")
    g = p.add_argument_group("layout (Megatron-LM's flags)")
    g.add_argument("--tp", type=positive_int, required=False, metavar="T", help="tensor-parallel size")
    g.add_argument("--cp", type=positive_int, default=1, metavar="C",
                   help="context-parallel size (default 1): the sequence split 2C ways over C devices (--cp-comm-type)")
    add_context_scheme_arguments(g, plan=False)
    g.add_argument("--pp", type=positive_int, default=1, metavar="P", help="pipeline-parallel size (default 1)")
    g.add_argument("--dp", type=positive_int, metavar="D", help="data-parallel size (default: GPUs / (T C P))")
    g.add_argument("--vp", type=positive_int, default=1, metavar="V",
                   help="virtual stages per pipeline stage: the interleaved schedule (default 1: 1F1B)")
    g.add_argument("--account-for-embedding-in-pipeline-split", action="store_true",
                   help="the embedding counts as one layer in the even split (the first chunk holds one layer fewer)")
    g.add_argument("--account-for-loss-in-pipeline-split", action="store_true",
                   help="the output layer and loss count as one layer (the last chunk holds one layer fewer)")
    g.add_argument("--sequence-parallel", action="store_true", help="sequence parallelism (with T > 1)")
    g.add_argument("--no-flash-attention", action="store_true", help="unfused attention (s^2 scores kept)")
    g.add_argument("--tp-comm-overlap", action="store_true", help="overlap sequence-parallel collectives with products")
    g.add_argument("--overlap-grad-reduce", action="store_true", help="gradient reduce during the last backward pass")
    g.add_argument("--overlap-param-gather", action="store_true", help="weight all-gather during the first forward pass")
    g.add_argument("--shard-gradients", action="store_true", help="shard gradients too (ZeRO-2)")
    g.add_argument("--ep", type=positive_int, default=1, metavar="E",
                   help="expert-parallel size (MoE models; --expert-model-parallel-size, default 1)")
    g.add_argument("--etp", type=positive_int, default=1, metavar="ET",
                   help="expert-tensor-parallel size (MoE models; 1 or --tp, default 1)")
    p.add_argument("--plan-out", metavar="PLAN.json",
                   help="write the scored layout as a plan (for export, evaluate and show; --out writes its workload)")
    return p


def _order_note(m: dict[str, Any]) -> str:
    """A note when the schedule's pass order holds more than 0.5% more or less than the model's
    memory (chunks of unequal activations; docs/problem.md §9.2)."""
    order, model = m["schedule_order_memory_bytes"], m["max_memory_bytes"]
    if abs(order - model) <= 0.005 * model:
        return ""
    return f"; by the schedule's pass order {order / 1e9:.2f} GB"


def _breakdown(m: dict[str, Any]) -> str:
    """What fills the fullest stage, on a line of its own."""
    return "\n" + " " * 14 + memory_breakdown_text(m["memory_breakdown"])


def _runner_up_form(cfg: Any, hw: Any, setup: Any, layout: Layout, m: dict[str, Any],
                    caveats: list[str]) -> dict[str, Any] | None:
    """Beyond the MoE fit rows' micro-batch (:func:`~piper.frontend.moe_costs.moe_micro_batch_caveat`),
    the layout priced with the runner-up MoE form fitted on the same rows (a caveat line is added); None
    otherwise."""
    other = runner_up_moe_hardware(cfg, hw)
    if other is None or moe_micro_batch_caveat(cfg, hw, layout.cp) is None or m["batch_time_s"] is None:
        return None
    check, line = runner_up_form_check(hw, m["batch_time_s"], score_layout(cfg, other, setup, layout)["batch_time_s"],
                                       "layout")
    caveats.append(line)
    return check


def _text(m: dict[str, Any]) -> str:
    gb = 1e9
    lines = [
        f"layout        {m['model']} on {m['gpus']} x {m['gpu']}: t={m['tp']}"
        + (f" c={m['cp']}" if m["cp"] > 1 else "") + f" p={m['pp']} d={m['dp']}"
        + (f" v={m['vp']} (interleaved)" if m["vp"] > 1 else " (1F1B)")
        + (f", experts e={m['ep']} e_t={m['etp']}" if m["ep"] > 1 or m["etp"] > 1 else "")
        + f", micro-batch {m['micro_batch']}, global batch {m['global_batch']} x {m['seq_length']} tokens, "
        f"{m['tmpc']}" + (f" ({', '.join(m['recompute_modules'])})" if m["recompute_modules"] else "")
        + f", {m['precision']}",
    ]
    if m["cp_comm_types"]:
        sizes = m.get("hierarchical_context_parallel_sizes")
        lines.append(f"context       c = {m['cp']}: {describe_comm_types(m['cp_comm_types'])}"
                     + (f", C1 x C2 = {sizes[0]} x {sizes[1]}" if sizes else ""))
    if not m["fits"]:
        lines.append(f"memory        {m['max_memory_bytes'] / gb:.2f} GB per GPU > limit {m['memory_limit_bytes'] / gb:.2f} GB "
                     f"(device less a reserve of {m['memory_reserve_bytes'] / gb:.2f} GB): does not fit" + _breakdown(m))
        return "\n".join(lines)
    b = m["bottleneck"]
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.3g} s" for k, v in b["seconds"].items() if v > 0)
    lines += [
        f"iteration     {m['batch_time_s']:.4g} s",
        f"throughput    {m['tokens_per_s']:.4g} tokens/s, {m['tokens_per_s_per_gpu']:.4g} tokens/s per GPU",
        (f"model FLOPs   {m['model_tflops_per_gpu']:.4g} TFLOP/s per GPU, MFU {100 * m['mfu']:.1f}% "
         f"(Megatron's count: full attention; {100 * m['mfu_causal']:.1f}% with its causal half)"),
        f"memory        {m['max_memory_bytes'] / gb:.2f} GB per GPU of {m['memory_limit_bytes'] / gb:.2f} GB "
        f"(device less a reserve of {m['memory_reserve_bytes'] / gb:.2f} GB)" + _order_note(m) + _breakdown(m),
        f"bottleneck    stage {b['stage']}: {b['largest'].replace('_', ' ')} ({parts})",
    ]
    return "\n".join(lines)


def no_effect_warnings(args: argparse.Namespace, dp: int, *, moe: bool) -> list[str]:
    """One line per flag given that changes nothing in this layout (accepted, as Megatron-LM accepts it,
    but said): sequence parallelism without tensor parallelism (Megatron-LM switches it off), the
    pipeline-split flags with one stage, and the data-parallel overlap and sharding flags of a dense
    model with no gradient reduction (d = c = 1)."""
    out = []
    if args.sequence_parallel and args.tp == 1:
        out.append("--sequence-parallel at --tp 1 changes nothing (Megatron-LM switches sequence parallelism off "
                   "without tensor parallelism)")
    if args.pp == 1:
        for flag, given in (("--account-for-embedding-in-pipeline-split", args.account_for_embedding_in_pipeline_split),
                            ("--account-for-loss-in-pipeline-split", args.account_for_loss_in_pipeline_split)):
            if given:
                out.append(f"{flag} at --pp 1 changes nothing (one stage holds every layer)")
    if dp == 1 and args.cp == 1 and not moe:
        for flag, given in (("--overlap-grad-reduce", args.overlap_grad_reduce),
                            ("--overlap-param-gather", args.overlap_param_gather),
                            ("--shard-gradients", args.shard_gradients)):
            if given:
                out.append(f"{flag} at data-parallel size 1 changes nothing in this score (no gradient is reduced, no "
                           "weight gathered); a workload written with --out carries it for plans with d > 1")
    return out


def cmd_score(args: argparse.Namespace) -> int:
    if args.list:
        from piper.cli.model import cmd_model

        return cmd_model(args)
    if args.tp is None:
        raise UsageError("score: --tp is required (see python -m piper score --help)")
    if args.tp_comm_overlap and (args.tp == 1 or not args.sequence_parallel):
        raise UsageError(f"--tp-comm-overlap overlaps sequence-parallel collectives: it needs --tp > 1 and "
                         f"--sequence-parallel (got --tp {args.tp}{'' if args.sequence_parallel else ', no --sequence-parallel'})")
    check_model_outputs(args, [("--out", args.out), ("--plan-out", args.plan_out)])
    if args.cp_comm_type is not None and args.cp == 1:
        raise UsageError(f"--cp-comm-type {args.cp_comm_type} needs context parallelism: give --cp C > 1")
    sizes = args.hierarchical_context_parallel_sizes
    if sizes is not None and sizes[0] * sizes[1] != args.cp:
        raise UsageError(f"--hierarchical-context-parallel-sizes {sizes[0]} {sizes[1]}: their product "
                         f"{sizes[0] * sizes[1]} must be --cp {args.cp}")
    if args.recompute_modules is not None and args.recompute != "selective":
        raise UsageError(f"--recompute-modules names what selective recomputation recomputes: it needs --recompute "
                         f"selective, got --recompute {args.recompute}")
    cfg, hw, setup = model_from_args(
        args, flash_attention=not args.no_flash_attention, tp_comm_overlap=args.tp_comm_overlap,
        overlap_grad_reduce=args.overlap_grad_reduce, overlap_param_gather=args.overlap_param_gather,
        shard_gradients=args.shard_gradients, cp_comm_type=args.cp_comm_type,
        cp_a2a_size=None if sizes is None else sizes[0])
    if setup.token_dispatcher == "flex" and args.etp > 1:
        raise UsageError(f"--token-dispatcher flex needs --etp 1, got --etp {args.etp} (the flex dispatcher, DeepEP or "
                         "HybridEP, is priced with expert tensor parallel size 1 only)")
    gpus = setup.nodes * hw.devices_per_node
    dp = args.dp
    if dp is None:
        width = args.tp * args.cp * args.pp
        if gpus % width:
            cp = f" x --cp {args.cp}" if args.cp > 1 else ""
            raise UsageError(f"--tp {args.tp}{cp} x --pp {args.pp} does not divide the {gpus} GPUs of --nodes {setup.nodes}")
        dp = gpus // width
    split = None
    if args.account_for_embedding_in_pipeline_split or args.account_for_loss_in_pipeline_split:
        split = megatron_split(cfg.layers, args.pp, args.vp, embedding=args.account_for_embedding_in_pipeline_split,
                               loss=args.account_for_loss_in_pipeline_split)
    layout = Layout(tp=args.tp, pp=args.pp, dp=dp, recompute=args.recompute,
                    sequence_parallel=bool(args.sequence_parallel), vp=args.vp, cp=args.cp, ep=args.ep, etp=args.etp,
                    stage_layers=split)
    m = score_layout(cfg, hw, setup, layout)
    for line in no_effect_warnings(args, dp, moe=cfg.moe is not None):  # after the layout's own checks
        print(f"piper: warning: {line}", file=sys.stderr)
    if args.out:
        write_workload(args.out, m["workload"])
    if args.plan_out:
        write_plan(args.plan_out, m["plan"], m["problem"], "--plan-out")
    public = {k: v for k, v in m.items() if k not in ("problem", "plan", "score", "workload")}
    public["workload_file"], public["plan_file"] = args.out, args.plan_out
    public["caveats"] = prediction_caveats(cfg, hw, layout.cp, setup.cp_comm_type)
    public["moe_form_check"] = _runner_up_form(cfg, hw, setup, layout, m, public["caveats"])
    if args.json:
        print(json.dumps(jsonable(public)))
    else:
        print(_text(public))
        for line in public["caveats"]:
            print(f"{'caveat':<13} {line}")
        for flag, path in (("--out", args.out), ("--plan-out", args.plan_out)):
            if path:
                print(f"{'written':<13} {path} ({flag}: the {'workload' if flag == '--out' else 'layout as a plan'})")
    return 0
