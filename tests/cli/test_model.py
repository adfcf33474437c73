"""``python -m piper model``: --json, --list, --out, and exit 2 with one line on user errors."""

import json

import pytest

from piper import evaluate, load_problem, plan_from_dict
from piper.cli.model import main


def test_json_summary_and_workload(cli, tmp_path):
    out = tmp_path / "w.json"
    r = cli("piper", "model", "megatron-1.7b", "--global-batch", "512", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)  # one JSON object, nothing else
    assert s["params"] == 1_652_230_656
    assert s["hardware_flops_per_iteration"] == pytest.approx(s["sc21_flops_per_iteration"], rel=1e-12)
    assert s["model_flops_per_iteration"] < s["hardware_flops_per_iteration"]
    assert s["tensor_parallel_degrees"] == [1, 2, 4, 8] and s["microbatches"] == 512
    problem = load_problem(out, strict=True)
    assert problem.n == 27 and problem.devices == 8
    nodes = [n.id for n in problem.nodes]
    plan = plan_from_dict({"stages": [{"nodes": nodes, "dataParallelDegree": 1, "tensorParallelDegree": 8,
                                       "TMPCids": {str(v): "none+sp" for v in nodes}}]})
    assert evaluate(problem, plan).tps > 0


def test_text_summary_with_overrides(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_act": "silu", "hidden_size": 64,
                               "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 4096}))
    assert main([str(cfg), "--seq", "32", "--micro-batch", "2", "--global-batch", "8", "--gpu", "h100",
                 "--nodes", "2", "--memory", "40GB", "--network-bandwidth", "10GB", "--efficiency", "0.4"]) == 0
    text = capsys.readouterr().out
    assert "sequence 32, micro-batch 2" in text and "N 4 micro-batches" in text
    assert "16 x h100-sxm-80gb" in text and "not written" in text


def test_list(cli):
    r = cli("piper", "model", "--list")
    assert r.returncode == 0, r.stderr
    for name in ("megatron-1.7b", "megatron-1t", "gpt3-175b", "llama2-70b", "llama3-405b", "h100-sxm-80gb"):
        assert name in r.stdout
    for name in ("mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b"):
        line = next(x for x in r.stdout.splitlines() if x.split() and x.split()[0] == name)
        assert " moe E=" in line
    assert "E=256 k=8 F=2048 mla" in r.stdout  # DeepSeek-V3


@pytest.mark.parametrize("args, message", [
    (["llama4-1t"], "unknown model preset"),
    (["llama3-8b", "--gpu", "v100"], "unknown GPU"),
    (["llama3-8b", "--global-batch", "3", "--micro-batch", "2"], "multiple of the micro-batch"),
    (["llama3-8b", "--efficiency", "2"], "efficiency"),
    (["missing/config.json"], "cannot read"),
    ([], "preset name or a config.json"),
])
def test_user_errors_exit_2_with_one_line(cli, args, message):
    r = cli("piper", "model", *args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.stderr


def test_bad_config_file_exit_2(cli, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 3, "num_hidden_layers": 2,
                               "vocab_size": 100, "max_position_embeddings": 64}))
    r = cli("piper", "model", str(cfg))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "attention_heads (3) must divide hidden_size (64)" in lines[0]


@pytest.mark.parametrize("command", ["model", "plan", "score"])
def test_list_json_is_one_object(cli, command):
    """``--list --json`` printed the text listing (not JSON) on each command."""
    r = cli("piper", command, "--list", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["presets"]["deepseek-v3"]["moe"] == {"experts": 256, "top_k": 8, "expert_ffn_hidden_size": 2048}
    assert out["presets"]["deepseek-v3"]["mla"] is True and out["presets"]["llama3-8b"]["moe"] is None
    assert out["presets"]["llama3-405b"]["layers"] == 126 and out["presets"]["llama3-405b"]["kv_heads"] == 8
    assert out["gpus"]["h100-sxm-80gb"]["peak_flops_bf16"] == 989e12 and "h100" in out["gpus"]["h100-sxm-80gb"]["aliases"]


@pytest.mark.parametrize("command, extra, named", [
    ("model", ["--nodes", "1"], "--nodes"),  # at its default value too
    ("score", ["--tp", "8"], "--tp"),
    ("plan", ["llama3-8b"], "the model argument"),
    ("plan", ["--uniform"], "--uniform"),
    ("score", ["--recompute-modules", "core_attn"], "--recompute-modules"),
    ("model", ["--gpu=h100"], "--gpu"),
])
def test_list_refuses_what_it_would_ignore(cli, command, extra, named):
    """``--list`` lists and exits: a flag given with it was ignored without a word."""
    r = cli("piper", command, "--list", *extra)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"piper: error: --list lists the presets and GPUs and takes no other argument; got {named}"]
    ok = cli("piper", command, "--lis", "--js")  # abbreviations of --list and --json are still the listing
    assert ok.returncode == 0 and "presets" in json.loads(ok.stdout)


@pytest.mark.parametrize("extra, named", [(["--gpu", "a100-80gb"], "replaces --gpu:"),
                                          (["--node-type", "dgx-h100"], "replaces --node-type:"),
                                          (["--gpu", "h100", "--node-type", "dgx-h100"], "replaces --gpu and --node-type")])
def test_hardware_file_with_gpu_flags_is_refused(cli, tmp_path, extra, named):
    """The file replaces --gpu / --node-type: both given, --gpu was ignored without a word (the answer
    was the file's h100, not the a100 asked for)."""
    f = tmp_path / "hw.json"
    f.write_text(json.dumps({"gpu": "h100"}))
    r = cli("piper", "score", "llama3-8b", "--tp", "2", "--hardware", str(f), *extra)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and named in r.stderr, r.stderr
    r = cli("piper", "score", "llama3-8b", "--tp", "2", "--hardware", str(f), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["gpu"] == "h100-sxm-80gb"
