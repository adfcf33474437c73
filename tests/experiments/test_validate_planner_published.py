"""experiments.validate.planner_published: the planner against the published layouts of Llama 3 and
Megatron-Bridge's MoE rows, priced the same way on both sides."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from experiments.validate.fit import score_case
from experiments.validate.planner_published import compare_published, published_cases, rescore_candidate
from piper.frontend.planner import Candidate
from piper.frontend.score import check_layout, layout_plan, score_layout


def _case(name: str):
    return next(c for c in published_cases() if c.name == name)


def test_the_rows_are_llama3s_three_and_the_latest_release_of_each_moe_layout() -> None:
    names = [c.name for c in published_cases()]
    assert len(names) == 9 + 3 + 5 and names[0] == "gpt-1.7b" and names[8] == "gpt-462b"
    assert names[9:12] == ["llama3-405b-8192", "llama3-405b-16384", "llama3-405b-16384-cp16"]
    moe = names[12:]
    # experiments/data/megatron_bridge_h100_moe.csv: Qwen3 e = 16 last ran in 26.06, GPT-OSS b = 1 in 26.04.01
    assert "qwen3-30b-a3b 26.06" in moe and "gpt-oss-120b 26.04.01" in moe
    assert "qwen3-30b-a3b 26.04" not in moe and "gpt-oss-120b 26.02" not in moe
    assert len(moe) == len(set(moe)) == 5


@pytest.mark.parametrize("name, vp", [("qwen3-30b-a3b 26.06", 1), ("llama3-405b-16384-cp16", 8), ("llama3-405b-16384", 8)])
def test_a_plan_is_rescored_as_score_prices_the_same_layout(name: str, vp: int) -> None:
    """The published layout's own plan, handed over as a search candidate (its c and scheme, e, b,
    recomputation, degree and, at v = 8, the resync's overlap window), is rescored to score_layout's
    batch time: the two sides share one pricing."""
    case = _case(name)
    lay = next(lay for _, lay in case.extra.get("variants", ((case.cfg, case.layout),)) if lay.vp == vp)
    cfg = case.cfg.with_changes(micro_batch=1)
    meg = score_layout(cfg, case.hw, case.setup, lay)
    assert meg["batch_time_s"] is not None
    plan = layout_plan(meg["problem"], check_layout(cfg, case.hw, case.setup, lay), lay)
    cand = Candidate(1, True, None, None, SimpleNamespace(plan=plan), lay.cp, lay.ep, (lay.recompute,),
                     degrees=(lay.width,), cp_comm_type=case.setup.cp_comm_type)
    assert rescore_candidate(case, case.hw, cand) == pytest.approx(meg["batch_time_s"], rel=1e-12)
    if case.cfg.moe is not None:  # (the long-context row has b = 1 only: 128 sequences over 16 x 8 chunks)
        # and it is not a constant: a micro-batch of 2 with the same plan is priced differently
        other = replace(cand, micro_batch=2)
        assert rescore_candidate(case, case.hw, other) != pytest.approx(meg["batch_time_s"], rel=1e-6)


def test_the_planner_does_no_worse_than_the_qwen3_bridge_layout() -> None:
    case = _case("qwen3-30b-a3b 26.06")
    r = compare_published(case, time_limit_s=None)
    published = score_case(case, (case.hw.gemm_efficiency, case.hw.gemm_half_dim))
    assert r["published_s"] == pytest.approx(published["batch_time_s"], rel=1e-12)
    assert (r["published_e"], r["published_b"], r["published_recompute"]) == (16, 1, "none")
    # the layout's own workload was searched and proven: the exact search does no worse there
    assert r["exact"] and r["search_no_worse"] is True
    assert r["search_on_that_workload_s"] <= r["published_on_search_s"] * (1 + 1e-9)
    assert r["planner_no_worse"] and r["planner_s"] <= r["published_s"]
    assert r["planner_devices"] == 16
    # the default reserve, 7.5% of the device, on both sides
    assert r["memory_reserve"] == "default"
    assert r["memory_limit_gb"] == pytest.approx(0.925 * case.hw.memory_bytes / 1e9, rel=1e-12)


def test_the_planner_does_no_worse_than_metas_long_context_layout() -> None:
    """[L3]'s CP 16 row, both sides against the whole device: the search covers Meta's layout (c = 16,
    v = 8) and does no worse, on 16,384 devices (a plan's stage width t counts t x c devices)."""
    case = _case("llama3-405b-16384-cp16")
    r = compare_published(case, time_limit_s=None)
    assert (r["published_c"], r["published_v"], r["published_recompute"]) == (16, 8, "none")
    assert r["search_no_worse"] is True and r["planner_no_worse"]
    assert r["planner_devices"] == 16384
    assert r["memory_reserve"] == "whole device"
    assert r["memory_limit_gb"] == pytest.approx(case.hw.memory_bytes / 1e9, rel=1e-12)
    assert r["planner_t"] * r["planner_c"] * r["planner_p"] * r["planner_d"] == 16384


def test_the_table_states_each_rows_memory_limit() -> None:
    from experiments.validate.planner_published import published_markdown

    row = {"row": "x", "gpus": 8, "memory_limit_gb": 85.52, "memory_reserve": "whole device", "published_t": 8,
           "published_c": 1, "published_p": 1, "published_d": 1, "published_e": 1, "published_v": 1, "published_b": 1,
           "published_recompute": "none", "published_s": 2.0, "planner_s": float("inf"), "search_no_worse": None,
           "exact": True, "planner_no_worse": False}
    other = {**row, "row": "y", "memory_limit_gb": 79.11, "memory_reserve": "default"}
    text = published_markdown([row, other])
    assert "| x | 8 | 85.52 (whole device) |" in text and "| y | 8 | 79.11 |" in text
    assert "the Llama 3 rows against the whole device" in text
