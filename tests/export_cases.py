"""A tiny transformer built by the front end, on one node of 8 A100s, and plans of it
with given layers per stage (for the export tests)."""

from __future__ import annotations

from piper.core.plan import Plan, Stage
from piper.core.problem import Problem
from piper.frontend import hardware
from piper.frontend.config import TransformerConfig
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem

TINY = TransformerConfig(name="tiny", layers=8, hidden_size=64, attention_heads=4, kv_heads=4, ffn_hidden_size=256,
                         vocab_size=1000, seq_length=128, micro_batch=2)
#: 1 node of 8 A100s, 32 sequences per batch: N = 32 / b micro-batches
SETUP = TrainingSetup(nodes=1, global_batch=32)


def tiny_problem(cfg: TransformerConfig = TINY, setup: TrainingSetup = SETUP) -> Problem:
    """The workload of ``cfg`` under ``setup``, loaded strictly."""
    return load_problem(build_workload(cfg, hardware("a100-80gb"), setup), strict=True)


def chain_plan(problem, sizes, d, t, tmpc="none", *, other="none", embedding_alone=False, head_alone=False) -> Plan:
    """Stages of ``sizes`` transformer layers in order; the embedding joins the first stage
    (or is a stage of its own), final norm and head the last (or a stage of their own).
    ``tmpc``: one id for every layer, or a list per layer; ``other``: the non-layer nodes' id.
    ``d`` / ``t``: one value, or a list per stage (in the order the stages come out)."""
    kind = {nd.id: nd.kind for nd in problem.nodes}
    layers = sorted((v for v in kind if kind[v] == "transformer"), key=lambda v: problem.node_by_id[v].layer_index)
    pre = [v for v in kind if kind[v] == "embedding"]
    post = [v for v in kind if kind[v] in ("final_norm", "output_head")]
    per_layer = tmpc if isinstance(tmpc, list) else [tmpc] * len(layers)
    groups, at = [], 0
    for n in sizes:
        groups.append(layers[at:at + n])
        at += n
    assert at == len(layers)
    groups = [pre] + groups if embedding_alone else [pre + groups[0]] + groups[1:]
    groups = groups + [post] if head_alone else groups[:-1] + [groups[-1] + post]
    ds = d if isinstance(d, list) else [d] * len(groups)
    ts = t if isinstance(t, list) else [t] * len(groups)
    pos = {v: i for i, v in enumerate(layers)}
    stages = []
    for g, dd, tt in zip(groups, ds, ts):
        stages.append(Stage(tuple(g), dd, tt, {v: (per_layer[pos[v]] if v in pos else other) for v in g}))
    return Plan(tuple(stages))


def args_dict(argv: list[str]) -> dict[str, str | None]:
    """--flag value pairs (None for switches)."""
    out, i = {}, 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = None
            i += 1
    return out
