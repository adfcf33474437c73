"""Sliding-window attention (GPT-OSS's alternating 128-token window): the attention FLOPs and
time of a windowed layer, the config's fields, the HF reader, and the workload's per-layer costs."""

from __future__ import annotations

import pytest

from piper.core.errors import FrontendError, ModelConfigError
from piper.frontend.hardware import hardware
from piper.frontend.hf import config_from_hf
from piper.frontend.operations import attention_score_fraction, layer_ops
from piper.frontend.presets import PRESETS
from piper.frontend.workload import TrainingSetup, build_workload

H100 = hardware("h100")
OSS = PRESETS["gpt-oss-120b"]


def test_score_fraction_by_hand():
    # w = 128 of s = 4,096: 128 / 4096 - 128^2 / (2 4096^2) = 1/32 - 1/2048
    assert attention_score_fraction(4096, 128) == pytest.approx(1 / 32 - 1 / 2048)
    assert attention_score_fraction(4096) == 0.5 == attention_score_fraction(4096, 4096) == attention_score_fraction(8, 9)
    # continuous at w = s
    assert attention_score_fraction(4096, 4095) == pytest.approx(0.5, rel=1e-6)


def test_windowed_layer_flops_and_time():
    assert OSS.attention_window(0) == 128 and OSS.attention_window(1) is None and OSS.attention_window(34) == 128
    # GPT-OSS: b = 1, s = 4,096, 64 heads of 64 (q_dim 4,096), t = 1
    full = 4 * 4096 * 4096 * 4096
    win = layer_ops(OSS, H100, 1, "selective", False, window=128)
    dense = layer_ops(OSS, H100, 1, "selective", False)
    flash = {(o.name, o.phase): o for o in win if o.name.startswith("flash")}
    assert flash["flash", "forward"].flops == pytest.approx(full * (1 / 32 - 1 / 2048))
    assert flash["flash.bwd", "backward"].flops == pytest.approx(2.5 * full * (1 / 32 - 1 / 2048))
    assert flash["flash", "recompute"].flops == pytest.approx(full * (1 / 32 - 1 / 2048))
    f = flash["flash", "forward"]
    assert f.time_s == pytest.approx(f.flops / (989e12 * 0.5) + 5e-6)
    # everything else is the same
    assert {(o.name, o.phase, o.time_s) for o in win if not o.name.startswith("flash")} == \
        {(o.name, o.phase, o.time_s) for o in dense if not o.name.startswith("flash")}
    # the unfused path materializes the whole score tensor: no discount
    from piper.frontend.operations import Kernels
    nf = Kernels(flash_attention=False)
    assert sum(o.time_s for o in layer_ops(OSS, H100, 1, "none", False, nf, window=128)) == pytest.approx(
        sum(o.time_s for o in layer_ops(OSS, H100, 1, "none", False, nf)))


def test_workload_prices_each_layer_with_its_window():
    cfg = OSS.with_changes(layers=4, sliding_window_layers=(0, 2))
    w = build_workload(cfg, H100, TrainingSetup(nodes=1, global_batch=8, expert_parallel=8), degrees=(1,),
                       recompute=("none",))
    times = [n["TMPCs"]["1"][0]["timePerSample"] for n in w["nodes"] if n["kind"] == "transformer"]
    assert times[0] == times[2] < times[1] == times[3]
    dense = PRESETS["llama2-7b"].with_changes(sliding_window=128, sliding_window_layers=(0,))
    with pytest.raises(FrontendError, match="--cp-comm-type p2p: llama2-7b's layer 0 .*sliding window of 128"):
        build_workload(dense, H100, TrainingSetup(nodes=1, global_batch=8, context_parallel=2, cp_comm_type="p2p"))


def test_config_validation():
    base = PRESETS["llama2-7b"]
    assert base.with_changes(sliding_window=64, sliding_window_layers=[1, 3]).sliding_window_layers == (1, 3)
    for changes, msg in (({"sliding_window": 0, "sliding_window_layers": (0,)}, "sliding_window must be"),
                         ({"sliding_window": 64}, "needs sliding_window_layers"),
                         ({"sliding_window_layers": (0,)}, "needs sliding_window"),
                         ({"sliding_window": 64, "sliding_window_layers": (3, 1)}, "increasing"),
                         ({"sliding_window": 64, "sliding_window_layers": (32,)}, "increasing indices in \\[0, 32\\)"),
                         ({"sliding_window": 64, "sliding_window_layers": "0"}, "sliding_window_layers must be")):
        with pytest.raises(ModelConfigError, match=msg):
            base.with_changes(**changes)


def _hf(**extra):
    raw = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 1024, "hidden_act": "silu"}
    raw.update(extra)
    return config_from_hf(raw, "t")


def test_hf_layer_types():
    cfg = _hf(sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2)
    assert (cfg.sliding_window, cfg.sliding_window_layers) == (128, (0, 2))
    assert _hf(sliding_window=4096).sliding_window is None  # no layer_types: not read
    assert _hf(sliding_window=None, layer_types=["full_attention"] * 4).sliding_window is None
    for extra, msg in (({"layer_types": ["full_attention"] * 3}, "layer_types must be a list of 4"),
                       ({"layer_types": ["sliding_attention", "local", "full_attention", "full_attention"]},
                        "'local' is not one of"),
                       ({"layer_types": ["sliding_attention"] * 4}, "sliding_window is not given"),
                       ({"layer_types": ["sliding_attention"] * 4, "sliding_window": 12.5}, "sliding_window must be")):
        with pytest.raises(ModelConfigError, match=msg):
            _hf(**extra)
