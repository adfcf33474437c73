"""The resync's overlap window per schedule (piper/frontend/overlap.py), by hand."""

import pytest

from piper.core.errors import FrontendError
from piper.frontend.overlap import overlap_microbatches
from piper.frontend.workload import NodeCost, TrainingSetup, resync_overlap_s


def test_one_micro_batch_without_interleaving():
    assert overlap_microbatches(1, 1, 4) == 1.0
    assert overlap_microbatches(8, 1, 64) == 1.0


def test_interleaved_window_by_hand():
    # p = 2, v = 6: ((6 - 1) * 2 + 1) / 6 = 11/6 micro-batches of the stage
    assert overlap_microbatches(2, 6, 8) == pytest.approx(11 / 6)
    # p = 16, v = 4: (3 * 16 + 1) / 4 = 12.25
    assert overlap_microbatches(16, 4, 16) == pytest.approx(12.25)
    # capped at the micro-batches per replica
    assert overlap_microbatches(16, 4, 8) == 8.0


def test_bad_counts_are_one_line():
    with pytest.raises(FrontendError, match="vp"):
        overlap_microbatches(2, 0, 4)


def test_resync_overlap_time_scales_with_the_window():
    cost = NodeCost("none", 3.0, 3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, forward_s=1.0, backward_s=2.0)
    both = TrainingSetup(overlap_grad_reduce=True, overlap_param_gather=True)
    assert resync_overlap_s(cost, both) == pytest.approx(3.0)
    from dataclasses import replace

    assert resync_overlap_s(cost, replace(both, resync_overlap_microbatches=2.5)) == pytest.approx(7.5)
    # only the gradient reduce: the backward pass alone
    assert resync_overlap_s(cost, TrainingSetup(overlap_grad_reduce=True, resync_overlap_microbatches=2.0)) == 4.0


def test_score_writes_the_interleaved_window():
    from piper.frontend.config import TransformerConfig
    from piper.frontend.hardware import hardware
    from piper.frontend.score import Layout, score_layout
    from piper.frontend.workload import node_costs

    cfg = TransformerConfig(name="tiny", layers=4, hidden_size=256, attention_heads=4, kv_heads=4,
                            ffn_hidden_size=1024, vocab_size=512, seq_length=128, micro_batch=1)
    hw = hardware("h100")
    setup = TrainingSetup(nodes=1, global_batch=8, overlap_grad_reduce=True, overlap_param_gather=True)
    r = score_layout(cfg, hw, setup, Layout(tp=1, pp=2, dp=4, recompute="none", vp=2))
    layer = next(nd for nd in r["problem"].nodes if nd.kind == "transformer")
    c = next(c for c in node_costs(cfg, hw, setup, "transformer", 1) if c.tmpc_id == "none")
    # m = 8 / (1 x 4) = 2 micro-batches per replica, p = 2, v = 2: min(2, (1 x 2 + 1) / 2) = 1.5
    assert layer.tmpc(1, "none").resync_overlap_time == pytest.approx(1.5 * (c.forward_s + c.backward_s))
