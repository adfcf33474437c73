"""Presets against published numbers.

Megatron-LM SC'21 Table 1: parameters against the paper's column and its
closed form 12lh^2(1 + 13/(12h) + (V+s)/(12lh)); FLOPs per iteration against
equation (3), 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with full recomputation.
Measured differences (our count - paper):

=============  ==============  ============  =========================
model          params (ours)   vs column     vs closed form
=============  ==============  ============  =========================
megatron-1.7b  1,652,230,656   -2.81 %       +2h = +4,608 (final LN)
megatron-3.6b  3,562,168,320   -1.05 %       +2h
megatron-7.5b  7,467,786,240   -0.43 %       +2h
megatron-18b   18,449,756,160  +0.27 %       +2h
megatron-39b   39,096,041,472  -0.01 %       +2h
megatron-76b   76,050,739,200  -0.06 %       +2h
megatron-145b  145,622,261,760 +0.02 %       +2h
megatron-310b  310,130,540,544 +0.01 %       +2h
megatron-530b  529,600,819,200 +0.00 %       +2h
megatron-1t    1,008,038,758,400 +0.00 %     +2h
=============  ==============  ============  =========================

Every count rounds to the column's value at its one decimal (the column is
rounded; the 1.7B gap is rounding). Hardware FLOPs equal equation (3) to
rounding error (relative difference < 1e-12): the same terms are counted.

Llama: the published nominal sizes (7B, 13B, 70B, 8B, 70B, 405B) within 5 %,
and the parameter counts of the released checkpoints exactly.
"""

import csv
from pathlib import Path

import pytest

from piper.frontend import (
    PRESETS,
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    model_params,
    preset,
    sc21_flops_per_iteration,
    sc21_params,
)
from piper.frontend.presets import MEGATRON_TABLE1

#: the published tables, shipped in the repository (experiments/data/README.md names the sources)
PUBLISHED = Path(__file__).resolve().parents[2] / "experiments" / "data"

# SC'21 Table 1, parameters (billions) and the global batch of each run
TABLE1 = {
    "megatron-1.7b": (1.7, 512), "megatron-3.6b": (3.6, 512), "megatron-7.5b": (7.5, 512),
    "megatron-18b": (18.4, 1024), "megatron-39b": (39.1, 1536), "megatron-76b": (76.1, 1792),
    "megatron-145b": (145.6, 2304), "megatron-310b": (310.1, 2160), "megatron-530b": (529.6, 2520),
    "megatron-1t": (1008.0, 3072),
}
# measured relative differences of our count from the paper's column (pinned)
COLUMN_DIFF = {
    "megatron-1.7b": -0.0281, "megatron-3.6b": -0.0105, "megatron-7.5b": -0.0043, "megatron-18b": 0.0027,
    "megatron-39b": -0.0001, "megatron-76b": -0.0006, "megatron-145b": 0.0002, "megatron-310b": 0.0001,
    "megatron-530b": 0.0, "megatron-1t": 0.0,
}


@pytest.mark.parametrize("name", list(TABLE1))
def test_table1_parameters(name):
    cfg = preset(name)
    ours = model_params(cfg)
    paper_b, _ = TABLE1[name]
    assert round(ours / 1e9, 1) == paper_b
    diff = (ours / 1e9 - paper_b) / paper_b
    assert diff == pytest.approx(COLUMN_DIFF[name], abs=1e-4)
    # the closed form omits only the final LayerNorm (2h parameters)
    assert ours - sc21_params(cfg) == pytest.approx(2 * cfg.hidden_size, abs=1e-3 * cfg.hidden_size)


@pytest.mark.parametrize("name", list(TABLE1))
def test_table1_flops_equation_3(name):
    cfg = preset(name)
    _, batch = TABLE1[name]
    ours = hardware_flops_per_iteration(cfg, batch, "full")
    assert ours == pytest.approx(sc21_flops_per_iteration(cfg, batch), rel=1e-12)
    # model FLOPs (no recomputation) are 3/4 of the layers' share plus the whole logit layer
    l, h, s, v = cfg.layers, cfg.hidden_size, cfg.seq_length, cfg.vocab_size
    expected_model = 72 * batch * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    assert model_flops_per_iteration(cfg, batch) == pytest.approx(expected_model, rel=1e-12)


def test_megatron_presets_match_the_published_csv():
    path = PUBLISHED / "megatron_sc21_table1.csv"
    rows = list(csv.DictReader(path.open()))
    assert [r["model"] for r in rows] == list(MEGATRON_TABLE1)
    for r in rows:
        cfg = preset(r["model"])
        assert (cfg.attention_heads, cfg.hidden_size, cfg.layers) == (
            int(r["attention_heads"]), int(r["hidden_size"]), int(r["layers"]))
        assert (cfg.vocab_size, cfg.seq_length, cfg.ffn_hidden_size) == (51_200, 2_048, 4 * cfg.hidden_size)
        assert round(model_params(cfg) / 1e9, 1) == float(r["params_billion"])


# released checkpoints' parameter counts (Hugging Face model cards / safetensors totals)
LLAMA = {
    "llama2-7b": (7e9, 6_738_415_616),
    "llama2-13b": (13e9, 13_015_864_320),
    "llama2-70b": (70e9, 68_976_648_192),
    "llama3-8b": (8e9, 8_030_261_248),
    "llama3-70b": (70e9, 70_553_706_496),
    "llama3-405b": (405e9, 405_853_388_800),
}


@pytest.mark.parametrize("name", list(LLAMA))
def test_llama_parameters(name):
    nominal, exact = LLAMA[name]
    ours = model_params(preset(name))
    assert ours == pytest.approx(nominal, rel=0.05)
    assert ours == exact


def test_llama3_405b_architecture():
    c = preset("llama3-405b")
    assert (c.layers, c.hidden_size, c.attention_heads, c.kv_heads, c.ffn_hidden_size, c.vocab_size) == (
        126, 16384, 128, 8, 53248, 128256)
    assert c.ffn_kind == "swiglu" and not c.tied_embeddings


def test_gpt3_175b():
    assert model_params(preset("gpt3-175b")) == pytest.approx(175e9, rel=0.01)


def test_every_preset_is_valid():
    assert len(PRESETS) == 23  # 17 dense + 6 mixture-of-experts
    for name, cfg in PRESETS.items():
        assert cfg.name == name
        assert model_params(cfg) > 0
