"""python -m piper score in process (issue 30): exit codes, --json one object, impossible layouts."""

import json

import pytest

from piper.cli.common import run_main
from piper.cli.main import main

BASE = ["score", "megatron-1.7b", "--gpu", "a100-80gb", "--nodes", "1", "--tp", "2", "--pp", "2",
        "--micro-batch", "1", "--global-batch", "16", "--recompute", "selective"]


def test_json_is_one_object(capsys):
    assert run_main(main, [*BASE, "--sequence-parallel", "--json"]) == 0
    out = capsys.readouterr().out.strip()
    m = json.loads(out)
    assert "\n" not in out
    for key in ("batch_time_s", "tokens_per_s", "mfu", "max_memory_bytes", "fits"):
        assert key in m
    assert m["fits"] and m["dp"] == 2 and m["tmpc"] == "selective+sp" and m["stage_layers"] == [12, 12]
    assert m["tokens_per_s"] == pytest.approx(16 * 2048 / m["batch_time_s"])
    assert 0 < m["mfu"] < 1 and m["mfu_causal"] < m["mfu"]


def test_text_and_interleaved(capsys):
    assert run_main(main, [*BASE, "--vp", "2", "--global-batch", "32"]) == 0
    out = capsys.readouterr().out
    assert "v=2 (interleaved)" in out and "iteration" in out and "bottleneck" in out


@pytest.mark.parametrize("extra, flag", [
    (["--dp", "3"], "--dp 3"),
    (["--pp", "5"], "--pp 5"),
    (["--tp", "3"], "--tp 3"),
    (["--vp", "5"], "--vp 5"),
    (["--global-batch", "15"], "--global-batch"),
    (["--precision", "fp8"], "peak_flops_fp8"),
    (["--tp", "0"], "--tp"),
])
def test_impossible_layouts_are_one_line_exit_2(extra, flag, capsys):
    assert run_main(main, [*BASE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "\n" not in err


def test_does_not_fit_is_reported_not_an_error(capsys):
    assert run_main(main, ["score", "llama3-70b", "--gpu", "a100-80gb", "--nodes", "1", "--tp", "8",
                           "--micro-batch", "1", "--global-batch", "8", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["fits"] is False and m["batch_time_s"] is None
