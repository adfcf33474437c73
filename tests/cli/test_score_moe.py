"""python -m piper score on mixture-of-experts models (issue 31): --ep / --etp, rule 6, active FLOPs."""

import json

import pytest

from piper.cli.common import run_main
from piper.cli.main import main
from piper.core.errors import FrontendError
from piper.frontend.hardware import hardware
from piper.frontend.presets import PRESETS
from piper.frontend.score import Layout, score_layout
from piper.frontend.workload import TrainingSetup

#: Mixtral 8x7B cut to 4 layers (the same per-layer costs, a quick workload)
SMALL = PRESETS["mixtral-8x7b"].with_changes(name="mixtral-4l", layers=4)
H100 = hardware("h100")


def _score(**layout):
    return score_layout(SMALL, H100, TrainingSetup(nodes=1, global_batch=16), Layout(**layout))


def test_ep_picks_the_moe_tmpc_and_shrinks_expert_memory():
    one = _score(tp=1, pp=1, dp=8, ep=1)
    eight = _score(tp=1, pp=1, dp=8, ep=8)
    layers = [v for v, t in eight["plan"].stages[0].tmpcs.items() if eight["problem"].nodes[v].kind == "transformer"]
    assert {eight["plan"].stages[0].tmpcs[v] for v in layers} == {"selective+ep8"}  # Layout's default recompute
    assert eight["ep"] == 8 and one["ep"] == 1
    # 4 layers x 7 of 8 experts' weights (2 + 4 bytes) and optimizer state (12 bytes over r = 8 / 8 = 1 copy)
    # no longer on each device; with e = 1 the state is split over r = 8
    expert = 3 * 4096 * 14336
    saved = 4 * (7 * expert * 6 + (8 * expert * 12 / 8 - expert * 12 / 1))
    assert one["max_memory_bytes"] - eight["max_memory_bytes"] == pytest.approx(saved, rel=1e-9)


def test_moe_flops_count_active_parameters():
    m = _score(tp=2, pp=1, dp=4, ep=4, sequence_parallel=True)
    s, h, l = 4096, 4096, 4
    attention = h * (h + 2 * 1024) + h * h
    per_layer_fwd = 2 * s * (attention + 2 * 3 * h * 14336) + s * 2 * h * 8 + 4 * s * s * h
    flops = 16 * (l * 3 * per_layer_fwd + 3 * 2 * s * h * 32000)
    assert m["model_flops_per_iteration"] == pytest.approx(flops)
    assert "ACTIVE" in m["flop_count"]


@pytest.mark.parametrize("layout, flag", [
    ({"tp": 1, "pp": 1, "dp": 8, "ep": 3}, "--ep 3 must divide"),
    ({"tp": 2, "pp": 1, "dp": 4, "ep": 2, "etp": 4, "sequence_parallel": True}, "--etp 4"),
    ({"tp": 1, "pp": 2, "dp": 4, "ep": 8}, "rule 6"),
    ({"tp": 2, "pp": 1, "dp": 4, "ep": 2}, "--sequence-parallel"),
])
def test_impossible_expert_layouts_name_the_flag(layout, flag):
    with pytest.raises(FrontendError, match=flag):
        _score(**layout)


def test_dense_model_refuses_ep(capsys):
    argv = ["score", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--tp", "1", "--ep", "2",
            "--micro-batch", "1", "--global-batch", "16", "--seq", "1024"]
    assert run_main(main, argv) == 2
    assert "not a mixture-of-experts model" in capsys.readouterr().err


def test_cli_json(capsys):
    # 2 nodes: r = 16 / 8 = 2 copies of each expert share its optimizer state (one node does not fit)
    argv = ["score", "qwen3-30b-a3b", "--gpu", "h100", "--nodes", "2", "--tp", "1", "--ep", "8",
            "--micro-batch", "1", "--global-batch", "16", "--seq", "1024", "--json"]
    assert run_main(main, argv) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["ep"] == 8 and m["etp"] == 1 and m["fits"]
    assert m["tokens_per_s_per_gpu"] == pytest.approx(16 * 1024 / m["batch_time_s"] / 16)


def test_capacity_factor_flag(capsys):
    argv = ["score", "qwen3-30b-a3b", "--gpu", "h100", "--nodes", "2", "--tp", "1", "--ep", "8",
            "--micro-batch", "1", "--global-batch", "16", "--seq", "1024", "--json"]
    assert run_main(main, argv) == 0
    dropless = json.loads(capsys.readouterr().out)
    assert run_main(main, [*argv, "--moe-capacity-factor", "2"]) == 0
    capped = json.loads(capsys.readouterr().out)
    # the routed-token buffers double (c = 2) and the expert products run at twice the rows
    assert capped["max_memory_bytes"] > dropless["max_memory_bytes"]
    assert capped["batch_time_s"] > dropless["batch_time_s"]
    dense = ["score", "llama3-8b", *argv[2:]]
    dense.remove("--ep")
    dense.remove("8")
    assert run_main(main, [*dense, "--moe-capacity-factor", "2"]) == 2
    assert "--moe-capacity-factor: llama3-8b is not a mixture-of-experts model" in capsys.readouterr().err


def test_token_dispatcher_flag(capsys):
    """--token-dispatcher flex prices DeepEP's dispatch (no more than the all-to-all's k copies of a
    token across two nodes); on a dense model the flag is a one-line usage error."""
    base = ["score", "qwen3-30b-a3b", "--gpu", "h100", "--nodes", "2", "--tp", "1", "--ep", "16", "--micro-batch", "1",
            "--global-batch", "64", "--seq", "1024", "--recompute", "none", "--json"]
    times = {}
    for d in ("alltoall", "flex"):
        assert run_main(main, [*base, "--token-dispatcher", d]) == 0
        times[d] = json.loads(capsys.readouterr().out)["batch_time_s"]
    assert times["flex"] < times["alltoall"]
    assert run_main(main, ["score", "llama3-8b", "--tp", "1", "--token-dispatcher", "flex"]) == 2
    assert "--token-dispatcher: llama3-8b is not a mixture-of-experts model" in capsys.readouterr().err
    # with expert tensor parallelism: both flags named (was the setup's field names)
    assert run_main(main, ["score", "mixtral-8x7b", "--tp", "2", "--ep", "4", "--etp", "2", "--token-dispatcher",
                           "flex", "--sequence-parallel"]) == 2
    err = capsys.readouterr().err
    assert "--token-dispatcher flex needs --etp 1, got --etp 2" in err and err.count("\n") == 1


def _score_json(capsys, *args):
    assert run_main(main, ["score", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_moe_model_on_hardware_without_moe_constants_is_flagged_optimistic(capsys, tmp_path):
    """FITTED_MOE holds H100 only: on a B200 the MoE layers' fixed time is not charged, and score
    says so; not for H100, not for a dense model, not when a hardware file sets the constant."""
    layout = ["--nodes", "2", "--tp", "1", "--pp", "2", "--ep", "8"]
    b200 = _score_json(capsys, "mixtral-8x7b", "--gpu", "b200", *layout)
    moe = [line for line in b200["caveats"] if "MoE-block" in line]
    assert len(moe) == 1 and "optimistic" in moe[0] and moe[0].startswith("b200 ")
    assert _score_json(capsys, "mixtral-8x7b", "--gpu", "h100", *layout)["caveats"] == []
    dense = _score_json(capsys, "llama3-8b", "--gpu", "b200", "--nodes", "1", "--tp", "8", "--pp", "1")["caveats"]
    assert not [line for line in dense if "MoE-block" in line]
    hw = tmp_path / "b200-moe.json"
    hw.write_text(json.dumps({"gpu": "b200", "moe_layer_overhead_s": 1e-3}))
    with_constant = _score_json(capsys, "mixtral-8x7b", "--hardware", str(hw), *layout)
    assert not [line for line in with_constant["caveats"] if "MoE-block" in line]
    assert with_constant["batch_time_s"] > b200["batch_time_s"]
