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
    # 1F1B: the pass order holds exactly the evaluator's y micro-batches
    assert m["schedule_order_memory_bytes"] == pytest.approx(m["max_memory_bytes"])
    assert m["tokens_per_s"] == pytest.approx(16 * 2048 / m["batch_time_s"])
    assert 0 < m["mfu"] < 1 and m["mfu_causal"] < m["mfu"]
    # the fullest stage's memory by term adds up to it: 1F1B's first stage holds p = 2 micro-batches
    b = m["memory_breakdown"]
    assert b["stage"] == 1 and b["microbatches_in_flight"] == 2 and b["expert_bytes"] == 0
    parts = b["activations_bytes"] + b["state_bytes"] + b["sharded_state_bytes"]
    assert parts == pytest.approx(m["max_memory_bytes"], rel=1e-12) and b["activations_bytes"] > 0


def test_text_and_interleaved(capsys):
    assert run_main(main, [*BASE, "--vp", "2", "--global-batch", "32"]) == 0
    out = capsys.readouterr().out
    assert "v=2 (interleaved)" in out and "iteration" in out and "bottleneck" in out
    assert "micro-batches in flight), weights, gradients and unsharded state" in out


@pytest.mark.parametrize("extra, flag", [
    (["--dp", "3"], "--dp 3"),
    (["--pp", "5"], "--pp 5"),
    (["--tp", "3"], "--tp 3"),
    (["--vp", "5"], "--vp 5"),
    (["--global-batch", "15"], "--global-batch"),
    (["--global-batch", "2"], "--pp 2: the micro-batches per replica"),
    (["--precision", "fp8"], "peak_flops_fp8"),
    (["--tp", "0"], "--tp"),
    # a millionth of peak at least: --efficiency 1e-300 was refused by a workload field's name
    (["--efficiency", "1e-300"], "argument --efficiency: must be in [1e-06, 1]"),
    # contradictions Megatron-LM refuses, which score accepted silently (the fuzz pass of 2026-12-04)
    (["--no-distributed-optimizer", "--overlap-param-gather"], "--overlap-param-gather needs the distributed optimizer"),
    (["--no-distributed-optimizer", "--shard-gradients"], "--shard-gradients needs the distributed optimizer"),
    (["--tp-comm-overlap"], "--tp-comm-overlap overlaps sequence-parallel collectives: it needs --tp > 1 and "
                            "--sequence-parallel"),
    (["--sequence-parallel", "--out", "."], "--out .: is a directory"),
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


def test_context_parallel_layout(capsys):
    # --cp 2 with t = 2, p = 2 on 8 GPUs: d = 8 / (2 x 2 x 2) = 1; each stage runs on d x t x c = 4 devices
    assert run_main(main, [*BASE, "--cp", "2", "--sequence-parallel", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert (m["cp"], m["dp"], m["gpus"], m["tmpc"]) == (2, 1, 8, "selective+sp")
    assert m["tokens_per_s"] == pytest.approx(16 * 2048 / m["batch_time_s"])
    assert run_main(main, [*BASE, "--cp", "2"]) == 0
    assert "t=2 c=2 p=2 d=1" in capsys.readouterr().out
    from piper.frontend.hardware import hardware
    from piper.frontend.presets import preset
    from piper.frontend.score import Layout, score_layout
    from piper.frontend.workload import TrainingSetup

    cfg = preset("megatron-1.7b").with_changes(micro_batch=1)
    r = score_layout(cfg, hardware("a100-80gb"), TrainingSetup(global_batch=16),
                     Layout(tp=2, pp=2, dp=1, cp=2, recompute="selective", sequence_parallel=True))
    assert [(s.d, s.t) for s in r["plan"].stages] == [(1, 4), (1, 4)]
    assert r["problem"].extra["model"]["contextParallel"] == 2


@pytest.mark.parametrize("extra, flag", [
    (["--cp", "3"], "--cp 3"),
    (["--cp", "2", "--seq", "2050"], "multiple of 2 x 2"),
    (["--cp", "0"], "--cp"),
    (["--cp", "2", "--dp", "2"], "--tp 2 x --cp 2 x --pp 2 x --dp 2 = 16 GPUs"),
    (["--cp", "2", "--no-flash-attention"], "--cp"),
])
def test_bad_context_parallel_is_one_line_exit_2(extra, flag, capsys):
    assert run_main(main, [*BASE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "\n" not in err


def test_megatron_split_counts_the_embedding_and_the_loss_as_layers():
    from piper.frontend.score import megatron_split

    # by hand: (layers + flags) / chunks each, one fewer in the first (embedding) / last (loss) chunk
    assert megatron_split(24, 2) == (12, 12)
    assert megatron_split(22, 2, 2, embedding=True, loss=True) == (5, 6, 6, 5)
    assert megatron_split(23, 2, 2, embedding=True) == (5, 6, 6, 6)
    assert megatron_split(23, 2, 2, loss=True) == (6, 6, 6, 5)
    assert megatron_split(126, 16, 8, embedding=True, loss=True) == (0,) + (1,) * 126 + (0,)
    with pytest.raises(ValueError, match="--account-for-embedding-in-pipeline-split"):
        megatron_split(24, 2, 2, embedding=True)


def test_account_for_embedding_and_loss_flags(capsys):
    # 24 layers + 2 over p v = 2 x 13 chunks: the first chunk holds only the embedding, the last only the head
    flags = ["--vp", "13", "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    assert run_main(main, [*BASE, *flags, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["stage_layers"] == [0] + [1] * 24 + [0] and m["fits"] and m["batch_time_s"] > 0
    # the empty end chunks make the groups unequal: the pass order holds less than y_g x activations
    # on the first group (its first chunk, the embedding's, holds the most micro-batches)
    assert m["schedule_order_memory_bytes"] < m["max_memory_bytes"]
    assert run_main(main, [*BASE, *flags]) == 0
    assert "by the schedule's pass order" in capsys.readouterr().out
    assert run_main(main, [*BASE, "--account-for-embedding-in-pipeline-split"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--account-for-embedding-in-pipeline-split" in err and "\n" not in err


@pytest.mark.parametrize("text, reserve", [("0", 0.0), ("0GB", 0.0), ("0.0 GiB", 0.0), ("2GB", 2e9), ("1 GiB", 2**30)])
def test_memory_reserve_takes_zero_in_any_unit(text, reserve, capsys):
    """"0" was taken and "0GB" refused as "must be > 0"."""
    assert run_main(main, [*BASE, "--memory-reserve", text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_reserve_bytes"] == reserve


@pytest.mark.parametrize("text", ["-0", "-1GB", "lots"])
def test_memory_reserve_refuses_negative_sizes(text, capsys):
    assert run_main(main, [*BASE, f"--memory-reserve={text}"]) == 2
    err = capsys.readouterr().err
    assert "argument --memory-reserve: bad size" in err and err.count("\n") == 1


def test_out_and_plan_out_write_what_was_scored(tmp_path, capsys):
    """score --out was accepted and ignored: it writes the workload scored, --plan-out the layout as
    a plan, which evaluate scores to the same batch time and export takes."""
    from piper import evaluate, load_plan, load_problem
    from piper.export import export_plan

    w, p = tmp_path / "w.json", tmp_path / "p.json"
    assert run_main(main, [*BASE, "--sequence-parallel", "--json", "--out", str(w), "--plan-out", str(p)]) == 0
    m = json.loads(capsys.readouterr().out)
    assert (m["workload_file"], m["plan_file"]) == (str(w), str(p))
    problem = load_problem(w, strict=True)
    plan = load_plan(p)
    assert evaluate(problem, plan).batch_time == pytest.approx(m["batch_time_s"], rel=1e-12)
    args = export_plan(problem, plan, "megatron").data["args"]
    assert args[args.index("--tensor-model-parallel-size") + 1] == "2" and "--sequence-parallel" in args


@pytest.mark.parametrize("layout, flags, words", [
    (["--tp", "1"], ["--sequence-parallel"], ["--sequence-parallel at --tp 1 changes nothing"]),
    (["--tp", "2", "--pp", "1"], ["--account-for-loss-in-pipeline-split", "--account-for-embedding-in-pipeline-split"],
     ["--account-for-embedding-in-pipeline-split at --pp 1", "--account-for-loss-in-pipeline-split at --pp 1"]),
    (["--tp", "4", "--pp", "2"], ["--overlap-grad-reduce", "--overlap-param-gather", "--shard-gradients"],
     ["--overlap-grad-reduce at data-parallel size 1", "--overlap-param-gather at data-parallel size 1",
      "--shard-gradients at data-parallel size 1"]),
])
def test_flags_that_change_nothing_are_said(layout, flags, words, capsys):
    """Accepted (a Megatron-LM command line may carry them) but one warning line each, and the score is
    the one without them: they were taken without a word."""
    base = ["score", "megatron-1.7b", "--gpu", "a100-80gb", "--nodes", "1", "--micro-batch", "1",
            "--global-batch", "16", "--json", *layout]
    assert run_main(main, base) == 0
    without = json.loads(capsys.readouterr().out)
    assert run_main(main, [*base, *flags]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["batch_time_s"] == without["batch_time_s"]
    lines = err.strip().splitlines()
    assert len(lines) == len(words) and all(line.startswith("piper: warning: ") for line in lines)
    assert all(w in line for w, line in zip(words, lines))
