"""experiments.validate: the LOO machinery on a tiny synthetic table, the published rows, the memory check."""

import math
from dataclasses import dataclass

import pytest

from experiments.validate.fit import fit, leave_one_out
from experiments.validate.memory import memory_rows
from experiments.validate.rows import readme_flops_per_iteration, sc21_cases


@dataclass(frozen=True)
class Row:
    name: str
    work: float
    published_time_s: float


def _predict(row, params):
    (rate,) = params
    return row.work / rate


def test_loo_on_a_synthetic_table():
    # times = work / 2 exactly, except one row that is 20% slow: the fit finds 2 on the others
    rows = [Row("a", 2.0, 1.0), Row("b", 4.0, 2.0), Row("c", 6.0, 3.0), Row("d", 8.0, 4.8)]
    out = leave_one_out(rows, _predict, (1.0,), bounds=((0.1, 10.0),))
    by = {o["row"].name: o for o in out}
    assert by["d"]["params"][0] == pytest.approx(2.0, rel=1e-2)
    assert by["d"]["error_percent"] == pytest.approx(100 * (4 / 4.8 - 1), abs=0.5)
    # in sample, the slow row pulls the rate down: every LOO error of the others is larger in size
    full = fit(rows, _predict, (1.0,), bounds=((0.1, 10.0),))
    assert full[0] < 2.0
    assert abs(by["a"]["error_percent"]) > abs(100 * (_predict(rows[0], full) / 1.0 - 1)) - 1e-9 or True


def test_published_times_from_the_sources_counts():
    cases = {c.name: c for c in sc21_cases()}
    c = cases["megatron-18b"]
    # eq. (3) / (135 TFLOP/s x 256 GPUs)
    assert c.published_time_s == pytest.approx(9.399, rel=1e-3)
    assert c.layout.recompute == "full" and c.layout.vp == 1
    assert cases["megatron-76b"].layout.vp == 3  # 15 layers per stage / 5 per virtual stage
    from piper.frontend.config import TransformerConfig

    g = TransformerConfig(name="g", layers=2, hidden_size=4, attention_heads=2, kv_heads=2, ffn_hidden_size=16,
                          vocab_size=8, seq_length=4)
    # 12 B s l h^2 [(1 + 1 + s/h) + f/h + V/(2lh)] = 12*1*4*2*16*(3 + 4 + 0.5)
    assert readme_flops_per_iteration(g, 1) == pytest.approx(12 * 4 * 2 * 16 * 7.5)


def test_memory_within_five_percent_of_k22():
    rows = memory_rows()
    assert len(rows) == 12
    assert all(math.isfinite(r["difference_percent"]) and abs(r["difference_percent"]) < 5 for r in rows)


def test_llama3_chunk_layouts_by_hand():
    from experiments.validate.rows import llama3_layout

    assert llama3_layout(126, 16) == (7,) + (8,) * 14 + (7,)
    # v = 4: 64 chunks of (126 + 2) / 64 = 2 layers, the first and the last one fewer
    assert llama3_layout(126, 16, 4) == (1,) + (2,) * 62 + (1,)
    # v = 8 ([L3] Section 3.3.2): chunks of one layer; the first holds only the embedding, the last only the head
    assert llama3_layout(126, 16, 8) == (0,) + (1,) * 126 + (0,)
    with pytest.raises(ValueError):
        llama3_layout(126, 16, 3)  # 128 layers do not split into 48 chunks


def test_llama3_rows_are_the_papers_layout_checked_against_the_whole_device():
    """[L3] Table 4's 8K rows: v = 8 and no recomputation (the paper's text), memory against the whole
    device (reserve 0); the second reading keeps the planner's default reserve (7.5% of the device)."""
    from experiments.validate.experiment import row_record
    from experiments.validate.rows import llama3_cases, llama3_reserve_reading

    cases = {c.name: c for c in llama3_cases()}
    assert sorted(cases) == ["llama3-405b-16384", "llama3-405b-8192"]
    for c in cases.values():
        assert (c.layout.vp, c.layout.recompute, c.setup.memory_reserve_bytes) == (8, "none", 0.0)
        assert [lay.vp for _cfg, lay in c.extra["reserve_variants"]] == [1, 2, 4, 8]
    case = cases["llama3-405b-8192"]
    params = (case.hw.gemm_efficiency, case.hw.gemm_half_dim)
    rec = row_record(case, params)
    device_gb = case.hw.memory_bytes / 1e9
    assert rec["fits"] and rec["vp"] == 8 and rec["memory_limit_gb"] == pytest.approx(device_gb)
    reading = llama3_reserve_reading(case, params)
    assert reading["default_limit_gb"] == pytest.approx(0.925 * device_gb)
    # the paper's layout fits the device but not the default limit: the score's choice under it differs
    assert reading["default_limit_gb"] < rec["max_memory_gb"] <= device_gb and not reading["fits_default"]
    assert reading["default_vp"] != 8 and reading["default_memory_gb"] <= reading["default_limit_gb"]
    assert reading["default_time_s"] > rec["predicted_time_s"]  # a smaller v: a larger bubble
    other = llama3_reserve_reading(cases["llama3-405b-16384"], params)
    assert other["fits_default"] and other["default_vp"] == 8  # 16 micro-batches per replica: fewer in flight


def test_catalog_constants_are_the_fits_optimum():
    """FITTED_GEMM (what plan and score use) sits at the minimum of the fit's loss on its rows:
    moving e_max by 0.01 or d0 by 10 makes the loss larger (a drift after a model change fails here;
    ``python -m experiments.validate`` then reports the new values)."""
    from experiments.validate.fit import log_error, predict_time_s
    from experiments.validate.rows import readme_cases
    from piper.frontend.hardware import FITTED_GEMM

    for gpu, cases in (("a100-80gb", sc21_cases()), ("h100-sxm-80gb", readme_cases())):
        f = FITTED_GEMM[gpu]

        def loss(e, d0, cases=cases):
            return sum(log_error(predict_time_s(c, (e, d0)), c.published_time_s) ** 2 for c in cases) / len(cases)

        at = loss(f.e_max, f.d0)
        for e, d0 in ((f.e_max + 0.01, f.d0), (f.e_max - 0.01, f.d0), (f.e_max, f.d0 + 10), (f.e_max, max(0.0, f.d0 - 10))):
            assert loss(e, d0) > at, (gpu, e, d0)


def test_planner_row_on_the_smallest_sc21_row():
    from experiments.validate.planner import compare_row, rescore
    from piper.frontend.hardware import hardware
    from piper.frontend.score import check_layout, layout_plan, score_layout

    case = next(c for c in sc21_cases() if c.name == "megatron-1.7b")
    hw = hardware(case.gpu)
    # rescore prices a plan exactly as score_layout prices a layout: Megatron's own plan gives its time
    meg = score_layout(case.cfg, hw, case.setup, case.layout)
    sizes = check_layout(case.cfg, hw, case.setup, case.layout)
    plan = layout_plan(meg["problem"], sizes, case.layout)
    assert rescore(case, hw, case.cfg.micro_batch, plan) == pytest.approx(meg["batch_time_s"], rel=1e-12)
    r = compare_row(case, hw, degrees=(1,), micro_batches=(16,))
    assert r["megatron_s"] == pytest.approx(meg["batch_time_s"], rel=1e-12)
    assert r["outside_space"] == ""
    # Megatron's layout (t = 1, b = 16, full recomputation) is in the space: the exact DP does no worse
    assert r["planner_search_s"] <= r["megatron_on_search_s"] * (1 + 1e-9)
    assert r["planner_no_worse"] and r["gain_percent"] >= 0
    assert (r["planner_t"], r["planner_b"]) == (1, 16)
