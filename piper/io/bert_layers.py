"""BERT-48/64/96 from BERT-32 by transformer-layer insertion (see ``experiments/workloads/README.md``)."""

from __future__ import annotations

from dataclasses import replace

from piper.core.errors import ProblemError
from piper.core.problem import TMPC, Edge, Node, Problem, problem_to_dict
from piper.io.workload import problem_from_dict

__all__ = ["insert_bert_layers", "INSERTED_LAYER_FIRST_ID"]

#: first label given to BERT layers inserted by :func:`insert_bert_layers`
#: (what the authors' code uses)
INSERTED_LAYER_FIRST_ID = 123456790


def _is_transformer(node: Node) -> bool:
    return node.name == "ParallelTransformerLayer"


def insert_bert_layers(problem: Problem, transformer_layers: int) -> Problem:
    """BERT with ``transformer_layers`` layers, made from BERT-32 as the authors do.

    Copies of the last transformer layer whose successor is also a transformer
    layer (layer 34 in bert32a100.json) are inserted in a chain between it and
    that successor; see ``experiments/workloads/README.md``. Copies are numbered
    123456790, 123456791, ... along the chain.
    """
    have = sum(1 for nd in problem.nodes if _is_transformer(nd))
    if have == 0:
        raise ProblemError("insert_bert_layers: the workload has no 'ParallelTransformerLayer' nodes")
    extra_layers = transformer_layers - have
    if extra_layers < 0:
        raise ProblemError(f"insert_bert_layers: the workload already has {have} transformer layers, more than {transformer_layers}")
    if extra_layers == 0:
        return problem
    # the anchor: the last transformer layer (in topological order) with a transformer successor
    anchor = succ = None
    for nid in problem.topological_order:
        nd = problem.node(nid)
        if not _is_transformer(nd):
            continue
        for e in problem.out_edges[nid]:
            if _is_transformer(problem.node(e.v)):
                anchor, succ = nd, problem.node(e.v)
    if anchor is None or succ is None:
        raise ProblemError("insert_bert_layers: no transformer layer is followed by another one")
    anchor_pred = None
    for e in problem.in_edges[anchor.id]:
        if _is_transformer(problem.node(e.u)):
            anchor_pred = e.u
    if anchor_pred is None:
        raise ProblemError(f"insert_bert_layers: layer {anchor.id} has no transformer predecessor")
    link = next(e for e in problem.out_edges[anchor.id] if e.v == succ.id)
    ids = {nd.id for nd in problem.nodes}
    copies = [INSERTED_LAYER_FIRST_ID + i for i in range(extra_layers)]
    clash = ids.intersection(copies)
    if clash:
        raise ProblemError(f"insert_bert_layers: node id {min(clash)} already exists")
    chain = [anchor.id, *copies, succ.id]

    def with_sync(c: TMPC, fw: dict[int, float] | None, bw: dict[int, float] | None) -> TMPC:
        return replace(c, sync_fw=c.sync_fw if fw is None else fw, sync_bw=c.sync_bw if bw is None else bw)

    new_nodes: list[Node] = []
    for nd in problem.nodes:
        if nd.id == anchor.id:
            tm = {
                t: tuple(with_sync(c, None, {(copies[0] if k == succ.id else k): v for k, v in c.sync_bw.items()}) for c in lst)
                for t, lst in nd.tmpcs.items()
            }
            new_nodes.append(replace(nd, tmpcs=tm))
        elif nd.id == succ.id:
            tm = {
                t: tuple(with_sync(c, {(copies[-1] if k == anchor.id else k): v for k, v in c.sync_fw.items()}, None) for c in lst)
                for t, lst in nd.tmpcs.items()
            }
            new_nodes.append(replace(nd, tmpcs=tm))
        else:
            new_nodes.append(nd)
    for i, cid in enumerate(copies):
        prev, nxt = chain[i], chain[i + 2]
        tm = {
            t: tuple(with_sync(c, {prev: c.sync_fw[anchor_pred]}, {nxt: c.sync_bw[succ.id]}) for c in lst)
            for t, lst in anchor.tmpcs.items()
        }
        # a copy is the same kind of layer; its layerIndex (if any) would repeat the anchor's, so it has none
        new_nodes.append(Node(cid, tm, anchor.name, dict(anchor.extra), kind=anchor.kind))
    new_edges = [e for e in problem.edges if not (e.u == anchor.id and e.v == succ.id)]
    for a, b in zip(chain, chain[1:]):
        new_edges.append(Edge(a, b, link.communication_cost, dict(link.extra)))
    # re-validate through the dict form so the result is checked like any input
    return problem_from_dict(problem_to_dict(replace(problem, nodes=tuple(new_nodes), edges=tuple(new_edges))))
