"""Megatron-LM's own start-up rules (tests/export/megatron_rules.py, written from Megatron's source)
applied to the arguments piper's exporter writes.

(1) The checker can fail: every rule fires on a hand-made bad argument list and stays silent on
good ones. (2) The exports of real plans pass it: layouts scored by the front end (``score``), the
plans ``python -m piper plan`` finds (dense, MoE, MLA, sliding windows, interleaved, context
parallel with each ``--cp-comm-type``, expert parallel, fp8, recomputation, uneven splits), SC'21's
configurations, chain plans with hand-picked splits and the BERT profile.

Layouts Megatron would reject are refused by the front end (``REFUSED``); the exports of four once
failed a rule (comments at their cases).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from piper import load_problem, plan_from_dict
from piper.core.errors import FrontendError
from piper.core.options import Options
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.export import export_plan
from piper.frontend.hardware import hardware
from piper.frontend.planner import (
    ONE_RECOMPUTE_SETTING,
    context_parallel_choices,
    micro_batch_choices,
    search_plans,
    takes_iteration_keys,
)
from piper.frontend.presets import PRESETS, preset
from piper.frontend.recompute import check_recompute_modules
from piper.frontend.score import Layout, score_layout
from piper.frontend.workload import TrainingSetup
from piper.solvers.registry import get_solver
from tests.commands import RunCommand
from tests.export.megatron_rules import FLAGS, RULES, check_megatron_args, parse_megatron_args, rule_ids
from tests.export_cases import chain_plan, tiny_problem

ROOT = Path(__file__).resolve().parents[2]
H100 = hardware("h100")

# ---------------------------------------------------------------------------------------------
# (1) the checker itself: good argument lists pass, each rule fires on a bad one
# ---------------------------------------------------------------------------------------------

_SHAPE = ["--hidden-size", "1024", "--ffn-hidden-size", "4096", "--num-attention-heads", "16",
          "--group-query-attention", "--num-query-groups", "4", "--seq-length", "2048",
          "--max-position-embeddings", "2048", "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear",
          "--position-embedding-type", "rope", "--bf16"]
#: world size 16: dp 4, 8 micro-batches per replica
DENSE = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
         "--global-batch-size", "32", "--num-layers", "8", "--sequence-parallel", "--use-distributed-optimizer",
         *_SHAPE]
#: world size 8: dp 2, tp 2 x cp 2
CP = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "1",
      "--global-batch-size", "32", "--num-layers", "8", "--context-parallel-size", "2", "--cp-comm-type", "p2p",
      "--sequence-parallel", "--use-distributed-optimizer", *_SHAPE]
#: CP with a sliding window on the odd (1-based) layers, all-to-all there and the ring elsewhere
WINDOW = [*CP, "--window-size", "128,0", "--window-attn-skip-freq", "2"]
WINDOW[WINDOW.index("--cp-comm-type") + 1:WINDOW.index("--cp-comm-type") + 2] = ["a2a", "p2p"] * 4
#: world size 8: dp 4, ep 4 x etp 1
MOE = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "1",
       "--global-batch-size", "16", "--num-layers", "4", "--sequence-parallel", "--use-distributed-optimizer", *_SHAPE,
       "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "512", "--expert-model-parallel-size",
       "4", "--expert-tensor-parallel-size", "1", "--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm"]
#: world size 8: DeepSeek-style MLA and MoE, tp 1, pp 2, dp 4, ep 4
MLA = ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
       "--global-batch-size", "16", "--num-layers", "4", "--use-distributed-optimizer", "--hidden-size", "1024",
       "--ffn-hidden-size", "4096", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings",
       "2048", "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear", "--position-embedding-type", "rope",
       "--bf16", "--multi-latent-attention", "--q-lora-rank", "384", "--kv-lora-rank", "128", "--qk-head-dim", "64",
       "--qk-pos-emb-head-dim", "32", "--v-head-dim", "64", "--num-experts", "8", "--moe-router-topk", "2",
       "--moe-ffn-hidden-size", "256", "--moe-shared-expert-intermediate-size", "256", "--moe-layer-freq",
       "([0]*1+[1]*3)", "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
       "--expert-model-parallel-size", "4", "--expert-tensor-parallel-size", "1", "--moe-token-dispatcher-type",
       "alltoall", "--moe-grouped-gemm"]
BASES = {"dense": (DENSE, 16), "cp": (CP, 8), "window": (WINDOW, 8), "moe": (MOE, 8), "mla": (MLA, 8)}


def mod(base: list[str], changes: dict[str, object]) -> list[str]:
    """``base`` with each flag of ``changes`` set: a value (str, int, list of values), True (a switch)
    or None (removed)."""
    out, i = [], 0
    while i < len(base):
        tok = base[i]
        j = i + 1
        while j < len(base) and not base[j].startswith("--"):
            j += 1
        if tok not in changes:
            out += base[i:j]
        i = j
    for flag, value in changes.items():
        if value is None:
            continue
        out.append(flag)
        if value is not True:
            out += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return out


GOOD = [
    ("dense", {}, None),
    ("dense", {"--num-layers-per-virtual-pipeline-stage": 2}, None),  # vpp 2, 8 micro-batches
    ("dense", {"--num-virtual-stages-per-pipeline-rank": 2}, None),
    ("dense", {"--pipeline-model-parallel-layout": "Et*3|t*2|t|t*2L"}, None),  # interleaved, uneven
    ("dense", {"--pipeline-model-parallel-layout": "E|t*4|t*4|L", "--pipeline-model-parallel-size": 4,
               "--global-batch-size": 16}, None),  # empty first and last stages; world 16: dp 2
    ("dense", {"--decoder-first-pipeline-num-layers": 3}, None),
    ("dense", {"--pipeline-model-parallel-size": 4, "--decoder-first-pipeline-num-layers": 1,
               "--decoder-last-pipeline-num-layers": 1}, None),
    ("dense", {"--account-for-embedding-in-pipeline-split": True, "--account-for-loss-in-pipeline-split": True,
               "--num-layers": 6}, None),
    ("dense", {"--recompute-granularity": "full", "--recompute-method": "block", "--recompute-num-layers": 2}, None),
    ("dense", {"--recompute-granularity": "selective", "--recompute-modules": ["core_attn", "mlp"]}, None),
    ("dense", {"--recompute-activations": True}, None),
    ("dense", {"--overlap-grad-reduce": True, "--overlap-param-gather": True}, None),
    ("dense", {"--fp8-format": "hybrid", "--fp8-recipe": "tensorwise", "--fp8-param-gather": True,
               "--first-last-layers-bf16": True}, None),
    ("dense", {"--tensor-model-parallel-size": 1}, None),  # --sequence-parallel at tp 1: switched off
    ("dense", {"--global-batch-size": None}, None),  # defaults to micro batch x dp
    ("dense", {"--tp-comm-overlap": True}, None),
    ("cp", {}, None),
    ("cp", {"--cp-comm-type": "all_gather"}, None),
    ("cp", {"--cp-comm-type": "a2a"}, None),
    ("cp", {"--cp-comm-type": "a2a+p2p", "--context-parallel-size": 4, "--hierarchical-context-parallel-sizes": [2, 2]},
     16),
    ("cp", {"--cp-comm-type": ["p2p", "a2a"] * 4}, None),
    ("window", {}, None),
    ("window", {"--cp-comm-type": "all_gather"}, None),
    ("window", {"--window-attn-skip-freq": "[1,0,1,0,1,0,1,0]"}, None),
    ("moe", {}, None),
    ("moe", {"--moe-token-dispatcher-type": "flex", "--moe-flex-dispatcher-backend": "hybridep",
             "--moe-expert-capacity-factor": 1.25, "--moe-pad-expert-input-to-capacity": True}, None),
    ("moe", {"--moe-layer-freq": "[1,0,1,0]"}, None),
    ("moe", {"--expert-tensor-parallel-size": 2}, None),  # no biases: e_t = 2 is fine
    ("moe", {"--overlap-moe-expert-parallel-comm": True}, None),
    ("mla", {}, None),
    ("mla", {"--rope-type": "rope", "--no-rope-fusion": True}, None),
    ("mla", {"--recompute-granularity": "selective", "--recompute-modules": ["mla_up_proj", "moe_act"]}, None),
]


@pytest.mark.parametrize("base, changes, world", GOOD)
def test_good_argument_lists_pass(base, changes, world):
    argv, default_world = BASES[base]
    assert check_megatron_args(mod(argv, changes), world or default_world) == []


#: (rule, base, changes, world size or None for the base's): each must report exactly that rule
BAD = [
    ("flag", "dense", {"--no-such-flag": True}, None),
    ("flag", "dense", {"--recompute-granularity": "partial"}, None),
    ("flag", "dense", {"--moe-token-dispatcher-type": "deepep"}, None),
    ("world-size", "dense", {"--context-parallel-size": 2}, 12),
    ("expert-grid", "moe", {"--expert-tensor-parallel-size": 2, "--expert-model-parallel-size": 8}, None),
    ("expert-dp-order", "moe", {"--pipeline-model-parallel-size": 2, "--use-tp-pp-dp-mapping": True}, None),
    ("optimizer-instances", "dense", {"--num-distributed-optimizer-instances": 3}, None),
    ("micro-batch", "dense", {"--micro-batch-size": None}, None),
    ("global-batch", "dense", {"--global-batch-size": 30}, None),
    ("interleaved-microbatches", "dense", {"--num-layers-per-virtual-pipeline-stage": 2, "--global-batch-size": 36},
     None),
    ("interleaved-microbatches", "dense", {"--num-layers-per-virtual-pipeline-stage": 2, "--global-batch-size": 4},
     None),
    ("interleaved-microbatches", "dense", {"--pipeline-model-parallel-layout": "Et*3|t*2|t|t*2L",
                                           "--global-batch-size": 12}, None),
    ("virtual-flags", "dense", {"--num-layers-per-virtual-pipeline-stage": 2,
                                "--num-virtual-stages-per-pipeline-rank": 2}, None),
    ("layout-stages", "dense", {"--pipeline-model-parallel-layout": "Et*3|t*3|t*2L"}, None),
    ("layout-syntax", "dense", {"--pipeline-model-parallel-layout": "Et*4|x*4L"}, None),
    ("layout-content", "dense", {"--pipeline-model-parallel-layout": "Et*4|t*3L"}, None),
    ("layout-content", "dense", {"--pipeline-model-parallel-layout": "t*4|Et*4L"}, None),
    ("layout-conflict", "dense", {"--pipeline-model-parallel-layout": "Et*4|t*4L",
                                  "--decoder-first-pipeline-num-layers": 3}, None),
    ("layout-conflict", "dense", {"--decoder-first-pipeline-num-layers": 3,
                                  "--account-for-embedding-in-pipeline-split": True}, None),
    ("virtual-uneven", "dense", {"--num-layers-per-virtual-pipeline-stage": 2,
                                 "--decoder-first-pipeline-num-layers": 2}, None),
    ("layers-per-stage", "dense", {"--num-layers": 9}, None),
    ("layers-per-stage", "dense", {"--num-layers-per-virtual-pipeline-stage": 3}, None),
    ("layers-per-stage", "dense", {"--account-for-embedding-in-pipeline-split": True}, None),
    ("uneven-stages", "dense", {"--pipeline-model-parallel-size": 4, "--decoder-first-pipeline-num-layers": 1}, None),
    ("uneven-stages", "dense", {"--decoder-first-pipeline-num-layers": 0}, None),
    ("uneven-stages", "dense", {"--decoder-first-pipeline-num-layers": 8}, None),
    ("uneven-stages", "dense", {"--num-virtual-stages-per-pipeline-rank": 2,
                                "--decoder-first-pipeline-num-layers": 3}, None),
    ("interleaved-pp", "dense", {"--pipeline-model-parallel-size": 1, "--num-virtual-stages-per-pipeline-rank": 2},
     None),
    ("interleaved-pp", "dense", {"--num-layers-per-virtual-pipeline-stage": 2, "--no-overlap-p2p-communication": True},
     None),
    ("required", "dense", {"--hidden-size": None}, None),
    ("heads-tp", "dense", {"--tensor-model-parallel-size": 8, "--num-attention-heads": 12, "--kv-channels": 64}, None),
    ("query-groups-tp", "dense", {"--num-query-groups": 3, "--num-attention-heads": 12, "--kv-channels": 64}, None),
    ("heads-groups", "dense", {"--num-query-groups": 8, "--num-attention-heads": 12, "--kv-channels": 64}, None),
    ("kv-channels", "dense", {"--hidden-size": 1000}, None),
    ("max-position", "dense", {"--max-position-embeddings": 1024}, None),
    ("sp-tokens", "dense", {"--seq-length": 2047}, None),
    ("sp-tokens", "cp", {"--seq-length": 2052, "--max-position-embeddings": 4096, "--tensor-model-parallel-size": 4},
     16),
    ("moe-sp", "moe", {"--sequence-parallel": None}, None),
    ("tp-comm-overlap", "dense", {"--tp-comm-overlap": True, "--sequence-parallel": None}, None),
    ("overlap-param-gather", "dense", {"--overlap-param-gather": True}, None),
    ("overlap-param-gather", "dense", {"--overlap-param-gather": True, "--overlap-grad-reduce": True,
                                       "--use-distributed-optimizer": None}, None),
    ("overlap-param-gather-step", "dense", {"--overlap-param-gather": True, "--overlap-grad-reduce": True,
                                            "--overlap-param-gather-with-optimizer-step": True}, None),
    ("gloo-dist-ckpt", "dense", {"--disable-gloo-process-groups": True, "--ckpt-format": "torch"}, None),
    ("cp-seq", "cp", {"--seq-length": 2049, "--max-position-embeddings": 4096}, None),
    ("cp-hierarchical", "cp", {"--cp-comm-type": "a2a+p2p"}, None),
    ("cp-hierarchical", "cp", {"--hierarchical-context-parallel-sizes": [2, 2]}, None),
    ("cp-comm-type-count", "cp", {"--cp-comm-type": ["p2p", "a2a"]}, None),
    ("cp-comm-type-value", "cp", {"--cp-comm-type": "allgather"}, None),
    ("cp-window", "window", {"--cp-comm-type": "p2p"}, None),
    ("cp-window", "window", {"--window-attn-skip-freq": None, "--cp-comm-type": ["a2a", "p2p"] * 4}, None),
    ("cp-a2a-heads", "cp", {"--context-parallel-size": 4, "--cp-comm-type": "a2a"}, 16),
    ("cp-a2a-heads", "cp", {"--context-parallel-size": 8, "--cp-comm-type": "a2a+p2p",
                            "--hierarchical-context-parallel-sizes": [4, 2]}, 16),
    ("recompute-full", "dense", {"--recompute-granularity": "full"}, None),
    ("recompute-full", "dense", {"--recompute-granularity": "full", "--recompute-method": "uniform"}, None),
    ("recompute-selective", "dense", {"--recompute-granularity": "selective", "--recompute-method": "uniform"}, None),
    ("recompute-selective", "dense", {"--recompute-activations": True, "--recompute-num-layers": 1}, None),
    ("recompute-modules", "dense", {"--recompute-granularity": "selective", "--recompute-modules": "attn"}, None),
    ("recompute-modules", "dense", {"--recompute-granularity": "selective", "--recompute-modules": "moe_act"}, None),
    ("recompute-modules", "dense", {"--recompute-granularity": "selective", "--recompute-modules": "mla_up_proj"},
     None),
    ("recompute-modules", "dense", {"--recompute-granularity": "selective", "--recompute-modules": "layernorm",
                                    "--fp8-format": "hybrid"}, None),
    ("distribute-saved-activations", "dense", {"--recompute-granularity": "full", "--recompute-method": "uniform",
                                               "--recompute-num-layers": 1, "--distribute-saved-activations": True},
     None),
    ("cuda-graph-recompute", "dense", {"--recompute-granularity": "full", "--recompute-method": "uniform",
                                       "--recompute-num-layers": 1, "--cuda-graph-impl": "local"}, None),
    ("fp16-bf16", "dense", {"--fp16": True}, None),
    ("fp8-param-gather", "dense", {"--fp8-param-gather": True}, None),
    ("fp4-fp8", "dense", {"--fp8-format": "hybrid", "--fp4-format": "e2m1"}, None),
    ("fp4-fp8", "dense", {"--fp4-param-gather": True}, None),
    ("fp8-recipe", "dense", {"--fp8-format": "hybrid", "--first-last-layers-bf16": True}, None),
    ("fp8-recipe", "dense", {"--fp8-format": "e4m3", "--fp8-recipe": "custom"}, None),
    ("fp8-recipe", "dense", {"--fp8-format": "e4m3", "--fp8-recipe": "mxfp8", "--first-last-layers-bf16": True,
                             "--num-layers-at-start-in-bf16": 5}, None),
    ("router-padding-fp8", "moe", {"--moe-router-padding-for-fp8": True}, None),
    ("grouped-gemm-bf16", "moe", {"--bf16": None}, None),
    ("mla", "mla", {"--rotary-interleaved": True}, None),
    ("mla", "mla", {"--rope-type": "rope"}, None),
    ("rope-type", "dense", {"--rope-type": "yarn"}, None),
    ("window", "window", {"--window-size": "128"}, None),
    ("window", "window", {"--window-attn-skip-freq": "[1,0]"}, None),
    ("ep-experts", "dense", {"--expert-model-parallel-size": 2}, None),
    ("ep-experts", "moe", {"--num-experts": 6}, None),
    ("ep-fp16", "moe", {"--bf16": None, "--fp16": True, "--moe-grouped-gemm": None}, None),
    ("moe-without-experts", "dense", {"--moe-ffn-hidden-size": 512}, None),
    ("moe-layer-freq", "moe", {"--moe-layer-freq": "[1,1,1]"}, None),
    ("moe-bias-etp", "moe", {"--disable-bias-linear": None, "--expert-tensor-parallel-size": 2}, None),
    ("moe-flex", "moe", {"--expert-model-parallel-size": 1, "--moe-token-dispatcher-type": "flex",
                         "--moe-flex-dispatcher-backend": "hybridep"}, None),
    ("moe-flex", "moe", {"--moe-enable-deepep": True}, None),
    ("moe-flex", "moe", {"--moe-token-dispatcher-type": "flex", "--moe-expert-capacity-factor": 1.0,
                         "--moe-pad-expert-input-to-capacity": True}, None),
    ("moe-shared-overlap", "moe", {"--moe-shared-expert-intermediate-size": 512, "--moe-shared-expert-overlap": True,
                                   "--moe-token-dispatcher-type": "allgather"}, None),
    ("moe-capacity", "moe", {"--moe-pad-expert-input-to-capacity": True}, None),
    ("moe-capacity", "moe", {"--moe-expert-capacity-factor": 1.0, "--moe-router-load-balancing-type": "sinkhorn"},
     None),
    ("moe-router", "moe", {"--moe-router-enable-expert-bias": True}, None),
    ("moe-router", "moe", {"--moe-router-topk": 1}, None),
    ("moe-router", "moe", {"--moe-router-group-topk": 2}, None),
    ("moe-ep-overlap", "moe", {"--overlap-moe-expert-parallel-comm": True, "--recompute-granularity": "full",
                               "--recompute-method": "uniform", "--recompute-num-layers": 1}, None),
]


@pytest.mark.parametrize("rule, base, changes, world", BAD, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD)])
def test_each_rule_fires_on_a_bad_argument_list(rule, base, changes, world):
    argv, default_world = BASES[base]
    assert check_megatron_args(argv, default_world) == []
    msgs = check_megatron_args(mod(argv, changes), world or default_world)
    assert rule_ids(msgs) == {rule}, msgs
    assert all(RULES[rule] in m for m in msgs)  # each message names where Megatron enforces it


def test_every_rule_has_a_firing_case():
    assert {c[0] for c in BAD} | {"sp-without-tp"} == set(RULES)


def test_sequence_parallel_at_tp_1_is_reported_in_strict_mode_only():
    argv = mod(DENSE, {"--tensor-model-parallel-size": 1})
    assert check_megatron_args(argv, 16) == []
    assert rule_ids(check_megatron_args(argv, 16, strict=True)) == {"sp-without-tp"}


def test_parser_reads_argparse_forms():
    a, errors = parse_megatron_args(["--cp-comm-type", "a2a", "p2p", "--num-layers=4", "--window-size=-1,0",
                                     "--moe-layer-freq", "([0]*1+[1]*3)", "--recompute-modules", "--sequence-parallel"])
    assert errors == []
    assert a["cp_comm_type"] == ["a2a", "p2p"] and a["num_layers"] == 4 and a["window_size"] == (-1, 0)
    assert a["moe_layer_freq"] == [0, 1, 1, 1] and a["recompute_modules"] == [] and a["sequence_parallel"]
    assert a["add_bias_linear"] and a["overlap_p2p_comm"]  # store_false defaults
    for argv, what in [(["--num-layers"], "expects one argument"), (["--num-layers", "x"], "invalid value"),
                       (["--bf16", "yes"], "unrecognized argument 'yes'"), (["--bf16=1"], "takes no value"),
                       (["--num-layer", "4"], "unrecognized argument '--num-layer'"),
                       (["--moe-layer-freq", "[1]*__import__('os')"], "Invalid pattern"),
                       (["--cp-comm-type"], "at least one argument"),
                       (["--window-size", "-1,0"], "expects one argument")]:  # argparse reads -1,0 as a flag
        _, errors = parse_megatron_args(argv)
        assert errors and all(e.startswith("flag: ") for e in errors) and what in errors[0], (argv, errors)
    assert all(f.startswith("--") for f in FLAGS)


# ---------------------------------------------------------------------------------------------
# (2) the exports of real plans
# ---------------------------------------------------------------------------------------------


def _check(ex, **kw) -> list[str]:
    return check_megatron_args(ex.data["args"], ex.data["world_size"], **kw)


def _cfg(name: str, **changes):
    return PRESETS[name].with_changes(**changes)


def _moe(name: str, **changes):
    cfg = PRESETS[name]
    return cfg.with_changes(moe=replace(cfg.moe, **changes))


OSS = dict(layers=4, sliding_window_layers=(0, 2))
QWEN = dict(layers=4, seq_length=1024)


#: (id, model, nodes, global batch, TrainingSetup keywords, Layout keywords)
SCORED = [
    ("megatron-18b-tp8-pp2", _cfg("megatron-18b", layers=8), 2, 32, {}, dict(tp=8, pp=2, dp=1, sequence_parallel=True)),
    ("megatron-18b-pp4-vp2-full", _cfg("megatron-18b", layers=8), 2, 32, {},
     dict(tp=4, pp=4, dp=1, vp=2, recompute="full", sequence_parallel=True)),
    ("megatron-18b-uneven", _cfg("megatron-18b", layers=8), 1, 32, {},
     dict(tp=2, pp=4, dp=1, stage_layers=(1, 3, 3, 1), sequence_parallel=True)),
    ("megatron-18b-uneven-first", _cfg("megatron-18b", layers=8), 1, 32, {},
     dict(tp=4, pp=2, dp=1, stage_layers=(3, 5), recompute="none")),
    ("megatron-18b-ends-alone", _cfg("megatron-18b", layers=8), 1, 32, {},
     dict(tp=2, pp=4, dp=1, stage_layers=(0, 4, 4, 0), sequence_parallel=True)),
    ("llama3-8b-tp2-pp2", _cfg("llama3-8b", layers=8), 1, 32, {}, dict(tp=2, pp=2, dp=2, sequence_parallel=True)),
    ("llama3-8b-vp2", _cfg("llama3-8b", layers=8), 1, 32, {}, dict(tp=2, pp=2, dp=2, vp=2, sequence_parallel=True)),
    ("llama3-8b-vp2-uneven", _cfg("llama3-8b", layers=8), 1, 32, {},
     dict(tp=2, pp=2, dp=2, vp=2, stage_layers=(1, 3, 2, 2), sequence_parallel=True)),
    ("llama3-8b-vp4-pp2", _cfg("llama3-8b", layers=8), 1, 16, {}, dict(tp=1, pp=2, dp=4, vp=4, recompute="full")),
    ("llama3-8b-none", _cfg("llama3-8b", layers=8), 1, 32, {}, dict(tp=1, pp=2, dp=4, recompute="none")),
    ("llama3-8b-fp8", _cfg("llama3-8b", layers=8, precision="fp8"), 1, 32, {},
     dict(tp=2, pp=2, dp=2, sequence_parallel=True)),
    ("llama3-8b-cp4-p2p", _cfg("llama3-8b", layers=8), 1, 32, {"context_parallel": 4, "cp_comm_type": "p2p"},
     dict(tp=2, pp=1, dp=1, cp=4, sequence_parallel=True)),
    ("llama3-8b-cp4-a2a", _cfg("llama3-8b", layers=8), 1, 32, {"context_parallel": 4, "cp_comm_type": "a2a"},
     dict(tp=2, pp=1, dp=1, cp=4, sequence_parallel=True)),
    ("llama3-8b-cp4-a2a+p2p", _cfg("llama3-8b", layers=8), 1, 32,
     {"context_parallel": 4, "cp_comm_type": "a2a+p2p", "cp_a2a_size": 2},
     dict(tp=2, pp=1, dp=1, cp=4, sequence_parallel=True)),
    # the export once wrote --cp-comm-type allgather, which Transformer Engine refuses (it takes all_gather)
    ("llama3-8b-cp4-allgather", _cfg("llama3-8b", layers=8), 1, 32, {"context_parallel": 4, "cp_comm_type": "allgather"},
     dict(tp=2, pp=1, dp=1, cp=4, sequence_parallel=True)),
    ("llama3-8b-cp2-pp2", _cfg("llama3-8b", layers=8), 2, 32, {"context_parallel": 2},
     dict(tp=2, pp=2, dp=2, cp=2, sequence_parallel=True)),
    ("llama3-70b-tp8-vp2", _cfg("llama3-70b", layers=8), 2, 32, {},
     dict(tp=8, pp=2, dp=1, vp=2, sequence_parallel=True)),
    ("mixtral-ep4", _cfg("mixtral-8x7b", layers=4), 2, 32, {}, dict(tp=2, pp=2, dp=4, ep=4, sequence_parallel=True)),
    ("mixtral-etp2", _cfg("mixtral-8x7b", layers=4), 1, 32, {"expert_tensor_parallel": True},
     dict(tp=2, pp=1, dp=4, ep=4, etp=2, sequence_parallel=True)),
    ("mixtral-vp2", _cfg("mixtral-8x7b", layers=8), 2, 32, {},
     dict(tp=2, pp=2, dp=4, vp=2, ep=8, sequence_parallel=True)),
    ("qwen3-ep8", _cfg("qwen3-30b-a3b", **QWEN), 1, 32, {}, dict(tp=1, pp=1, dp=8, ep=8, recompute="none")),
    ("qwen3-capacity", _moe("qwen3-30b-a3b", capacity_factor=1.25).with_changes(**QWEN), 1, 32, {},
     dict(tp=2, pp=1, dp=4, ep=4, sequence_parallel=True)),
    ("qwen3-flex-ep4", _cfg("qwen3-30b-a3b", **QWEN), 1, 32, {"token_dispatcher": "flex"},
     dict(tp=1, pp=1, dp=8, ep=4, recompute="none")),
    ("qwen3-flex-capacity", _moe("qwen3-30b-a3b", capacity_factor=1.25).with_changes(**QWEN), 1, 32,
     {"token_dispatcher": "flex"}, dict(tp=1, pp=1, dp=8, ep=4, recompute="none")),
    # a 4-byte MoE workload was exported with --moe-grouped-gemm, which asserts --bf16
    ("qwen3-fp32", _cfg("qwen3-30b-a3b", precision_bytes=4, **QWEN), 1, 32, {},
     dict(tp=1, pp=1, dp=8, ep=4, recompute="none")),
    ("qwen3-fp8", _cfg("qwen3-30b-a3b", precision="fp8", **QWEN), 1, 32, {},
     dict(tp=1, pp=1, dp=8, ep=4, recompute="none")),
    ("gpt-oss-ep8", _cfg("gpt-oss-120b", **OSS), 1, 32, {}, dict(tp=1, pp=1, dp=8, ep=8, recompute="full")),
    ("gpt-oss-cp2", _cfg("gpt-oss-120b", **OSS), 1, 32, {"context_parallel": 2},
     dict(tp=1, pp=1, dp=4, cp=2, ep=8, recompute="full")),
    ("gpt-oss-tp2-cp2", _cfg("gpt-oss-120b", **OSS), 2, 32, {"context_parallel": 2},
     dict(tp=2, pp=1, dp=4, cp=2, ep=8, sequence_parallel=True)),
    ("gpt-oss-pp2-list", _cfg("gpt-oss-120b", layers=4, sliding_window_layers=(1, 2)), 2, 32, {},  # "[0,1,1,0]"
     dict(tp=1, pp=2, dp=8, ep=8, recompute="full")),
    ("deepseek-v3-pp2", _cfg("deepseek-v3", layers=8), 2, 32, {}, dict(tp=1, pp=2, dp=8, ep=8, recompute="full")),
    ("deepseek-v3-vp2", _cfg("deepseek-v3", layers=8), 2, 32, {},
     dict(tp=1, pp=2, dp=8, vp=2, ep=8, recompute="full")),
    ("deepseek-v3-tp2", _cfg("deepseek-v3", layers=4), 2, 32, {},
     dict(tp=2, pp=1, dp=8, ep=16, sequence_parallel=True, recompute="selective")),
    # --recompute-modules: the Megatron-Bridge recipes' settings (GPT-OSS: layernorm, moe_act; DeepSeek-V3:
    # mla_up_proj, layernorm) and the dense MLP's
    ("gpt-oss-modules", _cfg("gpt-oss-120b", **OSS), 1, 32, {"recompute_modules": ("layernorm", "moe_act")},
     dict(tp=1, pp=2, dp=4, ep=4, recompute="selective")),
    ("deepseek-v3-modules", _cfg("deepseek-v3", layers=4), 2, 32,
     {"recompute_modules": ("mla_up_proj", "layernorm", "moe", "mlp")},
     dict(tp=2, pp=1, dp=8, ep=16, sequence_parallel=True, recompute="selective")),
    ("llama3-8b-mlp", _cfg("llama3-8b", layers=8), 1, 32, {"recompute_modules": ("core_attn", "mlp")},
     dict(tp=2, pp=2, dp=2, sequence_parallel=True, recompute="selective")),
]


@pytest.mark.parametrize("name, cfg, nodes, global_batch, setup, layout", SCORED,
                         ids=[getattr(c, "values", c)[0] for c in SCORED])
def test_scored_layouts_export_what_megatron_accepts(name, cfg, nodes, global_batch, setup, layout):
    m = score_layout(cfg, H100, TrainingSetup(nodes=nodes, global_batch=global_batch, **setup), Layout(**layout))
    ex = export_plan(m["problem"], m["plan"], "megatron")
    assert _check(ex) == []
    modules = setup.get("recompute_modules")
    if modules is not None:  # the modules the workload was priced with are the ones exported, in Megatron's words
        assert " ".join(["--recompute-modules", *check_recompute_modules(modules)]) in ex.text
    elif layout.get("recompute") == "selective":
        assert "--recompute-modules" not in ex.text  # Megatron-Core's default, core_attn


#: layouts Megatron-Core would reject, which the front end refuses before an export: (id, model,
#: setup keywords, Layout keywords, the words of the error)
REFUSED = [
    # transformer_config.py: "Bias in MoE is only supported when ETP==1"
    ("gpt-oss-etp2", _cfg("gpt-oss-120b", **OSS), {"expert_tensor_parallel": True},
     dict(tp=2, pp=1, dp=4, ep=4, etp=2, sequence_parallel=True), "--etp 2: gpt-oss-120b's linear layers have biases"),
    # token_dispatcher.py: "Flex token dispatcher requires TPxEP > 1"
    ("qwen3-flex-ep1", _cfg("qwen3-30b-a3b", **QWEN), {"token_dispatcher": "flex"},
     dict(tp=1, pp=1, dp=8, ep=1, recompute="none"), "--token-dispatcher flex needs --ep > 1"),
]


@pytest.mark.parametrize("name, cfg, setup, layout, words", REFUSED, ids=[c[0] for c in REFUSED])
def test_layouts_megatron_rejects_are_refused(name, cfg, setup, layout, words):
    with pytest.raises(FrontendError, match=re.escape(words)):
        score_layout(cfg, H100, TrainingSetup(nodes=1, global_batch=32, **setup), Layout(**layout))


def test_fp8_is_exported_as_priced():
    """The FP8 workload's export names Transformer Engine's delayed scaling (history 1,024, max), which
    the costs assume (piper/frontend/workload.py FP8_AMAX_HISTORY); the bf16 one has no FP8 flag."""
    layout = Layout(tp=1, pp=1, dp=8, ep=4, recompute="none")
    args = {}
    for precision in ("bf16", "fp8"):
        m = score_layout(_cfg("qwen3-30b-a3b", precision=precision, **QWEN), H100,
                         TrainingSetup(nodes=1, global_batch=32), layout)
        args[precision] = export_plan(m["problem"], m["plan"], "megatron").data["args"]
    assert not any(a.startswith("--fp8") for a in args["bf16"])
    fp8 = args["fp8"]
    got = {fp8[i]: fp8[i + 1] for i, a in enumerate(fp8[:-1]) if a.startswith("--fp8")}
    assert got == {"--fp8-format": "hybrid", "--fp8-recipe": "delayed", "--fp8-amax-history-len": "1024",
                   "--fp8-amax-compute-algo": "max"}
    assert "--bf16" in fp8


def _sc21_rows():
    with open(ROOT / "experiments" / "data" / "megatron_sc21_table1.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_sc21_configurations_pass():
    for row in _sc21_rows():
        t, p, gpus = int(row["tensor_parallel"]), int(row["pipeline_parallel"]), int(row["gpus"])
        layers, mb, gb = int(row["layers"]), int(row["micro_batch"]), int(row["global_batch"])
        cfg = preset(row["model"]).with_changes(micro_batch=mb, seq_length=2048)
        problem = tiny_problem(cfg, TrainingSetup(nodes=gpus // 8, global_batch=gb, distributed_optimizer=False))
        ex = export_plan(problem, chain_plan(problem, [layers // p] * p, gpus // (t * p), t, "full"), "megatron")
        assert _check(ex) == [], row["model"]


@pytest.mark.parametrize("sizes, v, kwargs, tmpc", [
    ([2, 3, 3], 1, {}, "none"),
    ([1, 3, 3, 1], 1, {}, "full"),
    ([2, 3, 1, 2], 1, {}, "selective"),
    ([4, 4], 1, {"embedding_alone": True}, "none"),
    ([4, 4], 1, {"head_alone": True}, "none"),
    ([2, 2, 2, 2], 2, {}, "none"),
    ([1, 2, 3, 2], 2, {}, "none"),
    ([1, 1, 1, 1, 1, 1, 1, 1], 4, {}, "none"),
    ([2, 2, 2, 2], 1, {}, ["full", "none"] * 4),  # block method: the first layer of each stage
])
def test_chain_plans_pass(sizes, v, kwargs, tmpc):
    problem = tiny_problem()
    plan = chain_plan(problem, sizes, 1, 1, tmpc, **kwargs)
    if v > 1:
        plan = Plan(plan.stages, Schedule(INTERLEAVED, v))
    ex = export_plan(problem, plan, "megatron")
    assert _check(ex) == []


def test_fit_recompute_export_passes():
    """--fit-recompute's settings (here: an interleaved plan mixing none and full)."""
    problem = tiny_problem()
    plan = chain_plan(problem, [2, 2, 2, 2], 1, 1)
    kinds = ["none", "full"]
    mixed = Plan(tuple(replace(s, tmpcs={u: (kinds[j % 2] if problem.node_by_id[u].kind == "transformer" else "none")
                                         for u in s.nodes}) for j, s in enumerate(plan.stages)),
                 Schedule(INTERLEAVED, 2))
    ex = export_plan(problem, mixed, "megatron", fit_recompute=True)
    assert _check(ex) == []


def test_bert_profile_export_passes_without_model_shape():
    problem = load_problem(str(ROOT / "experiments" / "workloads" / "bert32a100.json"))
    order = problem.topological_order
    layers = [v for v in order if problem.node_by_id[v].name == "ParallelTransformerLayer"]
    first = [v for v in order if v not in layers[12:] and v != 36]
    rest = [v for v in order if v not in first]
    plan = Plan((Stage(tuple(first), 2, 2, {v: "vanilla" for v in first}),
                 Stage(tuple(rest), 2, 2, {v: "vanilla" for v in rest})))
    ex = export_plan(problem, plan, "megatron", micro_batch=8)
    assert _check(ex, model_shape=False) == []
    assert rule_ids(_check(ex)) == {"required"}  # the shape flags are the user's: the export says so


#: ``python -m piper plan MODEL --gpu h100 --uniform ARGS``: the runnable plan, exported
PLANNED = [
    ("megatron-1.7b", ["--nodes", "1", "--global-batch", "64"]),
    ("megatron-18b", ["--nodes", "2", "--global-batch", "64"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "64", "--schedule", "interleaved"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "36", "--schedule", "interleaved"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "32", "--sequence-parallel", "off"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "32", "--precision", "fp8"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "32", "--cp", "2", "--cp-comm-type", "a2a"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "32", "--cp-comm-type", "a2a+p2p",
                   "--hierarchical-context-parallel-sizes", "2", "2"]),
    ("llama3-8b", ["--nodes", "1", "--global-batch", "32", "--cp", "2", "--cp-comm-type", "allgather"]),
    ("llama3-70b", ["--nodes", "4", "--global-batch", "32"]),
    ("mixtral-8x7b", ["--nodes", "2", "--global-batch", "64"]),
    ("qwen3-30b-a3b", ["--nodes", "1", "--global-batch", "64", "--token-dispatcher", "flex",
                       "--moe-capacity-factor", "1.5"]),
]


@pytest.mark.parametrize("model, extra", PLANNED,
                         ids=[" ".join([v[0], *v[1]]) for v in (getattr(c, "values", c) for c in PLANNED)])
def test_planned_exports_pass(cli: RunCommand, tmp_path: Path, model: str, extra: list[str]) -> None:
    plan_file, workload_file = tmp_path / "plan.json", tmp_path / "workload.json"
    proc = cli("piper", "plan", model, "--gpu", "h100", "--uniform", "--json", *extra,
               "--plan-out", str(plan_file), "--out", str(workload_file))
    assert proc.returncode == 0, proc.stderr[-400:]
    assert json.loads(proc.stdout)["megatron"]["exports"]
    problem = load_problem(str(workload_file))
    ex = export_plan(problem, plan_from_dict(json.loads(plan_file.read_text())), "megatron")
    assert _check(ex) == []


def _runnable(cfg, nodes: int, global_batch: int, schedule: str = "1f1b", cp: int | None = None, **setup_kw):
    """The runnable plan ``plan`` finds (the same search: one recomputation setting, one (d, t)) for a
    model the command line cannot shrink (a preset with fewer layers)."""
    setup = TrainingSetup(nodes=nodes, global_batch=global_batch, sequence_parallel=True, **setup_kw)
    info = get_solver("dp")
    options = Options(progress=False, schedule=schedule, max_virtual_stages=min(8, cfg.layers))
    search = search_plans(cfg, H100, setup, info, options, micro_batches=micro_batch_choices(global_batch, None),
                          free=False, context_parallels=context_parallel_choices(cfg, H100, setup, cp, None),
                          prune=True, check_schedules=schedule != "interleaved", recomputes=ONE_RECOMPUTE_SETTING,
                          per_degree=True, iteration_keys=takes_iteration_keys(info, setup))
    assert search.runnable is not None
    return search.runnable.problem, search.runnable.result.plan


@pytest.mark.parametrize("cfg, nodes, global_batch, kw", [
    (_cfg("deepseek-v3", layers=6), 2, 32, {}),
    (_cfg("gpt-oss-120b", **OSS), 1, 32, {}),
    (_cfg("gpt-oss-120b", **OSS, seq_length=32768), 2, 16, {"cp": 2}),
    (_cfg("llama3-70b", layers=8), 2, 32, {"schedule": "interleaved"}),
], ids=["deepseek-v3-6", "gpt-oss-4", "gpt-oss-4-cp2", "llama3-70b-8-interleaved"])
def test_planned_exports_of_reduced_presets_pass(cfg, nodes, global_batch, kw):
    problem, plan = _runnable(cfg, nodes, global_batch, **kw)
    assert _check(export_plan(problem, plan, "megatron")) == []
