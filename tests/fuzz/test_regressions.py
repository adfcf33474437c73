"""Each reproducer of issue 28 (480 hostile probes) as a plain test: the input now ends in a
result or in one line naming the problem (exit status 2 on the command line)."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piper import (
    Options,
    check_result,
    load_plan,
    load_problem,
    make_result,
    problem_from_dict,
)
from piper.cli.main import main as piper_main
from piper.core.errors import (
    HardwareError,
    ModelConfigError,
    PlanFormatError,
    ProblemError,
    SolverError,
    UsageError,
)
from piper.core.options import candidates, divisors_up_to
from piper.core.plan import Plan, Stage
from piper.core.result import Result, Status
from piper.frontend.hardware import hardware_from_file
from piper.frontend.hf import config_from_hf, load_hf_config
from piper.io.jsonfile import parse_json
from tests.fuzz.inputs import assert_contract, base_hf, base_plan, base_workload, call

PROG = "piper"


def _write(tmp_path: Path, name: str, data: str | bytes | dict) -> Path:
    path = tmp_path / name
    if isinstance(data, dict):
        data = json.dumps(data)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _fails(argv: list[str], *words: str, main=piper_main, prog: str = PROG) -> str:
    """Run ``argv``; it must exit 2 with one error line holding every word; returns the line."""
    rc, out, err, _ = call(main, argv, prog)
    assert_contract(rc, out, err, prog)
    assert rc == 2, (rc, out, err)
    line = err.rstrip("\n").split("\n")[-1]
    for word in words:
        assert word in line, (word, line)
    return line


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return _write(tmp_path, "small.json", base_workload())


# ---- 1. one way in for every file -------------------------------------------------------


def test_integer_of_5000_digits_in_any_file(tmp_path: Path, small: Path) -> None:
    big = "9" * 5000
    text = small.read_text().replace('"maxDevices": 4', f'"maxDevices": {big}')
    _fails(["info", str(_write(tmp_path, "w.json", text))], "5000 digits", "line 1")
    plan = json.dumps(base_plan()).replace('"dataParallelDegree": 1', f'"dataParallelDegree": {big}')
    _fails(["evaluate", str(small), str(_write(tmp_path, "p.json", plan))], "5000 digits")
    hf = json.dumps(base_hf()).replace('"vocab_size": 1000', f'"vocab_size": {big}')
    _fails(["model", str(_write(tmp_path, "config.json", hf))], "5000 digits")
    with pytest.raises(HardwareError, match="5000 digits"):
        hardware_from_file(_write(tmp_path, "hw.json", '{"gpu": "h100", "memory_bytes": ' + big + "}"))


def test_binary_file_to_model_and_every_reader(tmp_path: Path) -> None:
    binary = _write(tmp_path, "bin.json", bytes(range(256)) * 4)
    _fails(["model", str(binary)], "not UTF-8")
    _fails(["info", str(binary)], "not UTF-8")
    with pytest.raises(PlanFormatError, match="not UTF-8"):
        load_plan(binary)
    with pytest.raises(ModelConfigError, match="not UTF-8"):
        load_hf_config(binary)


def test_config_nested_100000_deep(tmp_path: Path) -> None:
    deep = _write(tmp_path, "deep.json", '{"a":' * 100_000 + "1" + "}" * 100_000)
    _fails(["model", str(deep)], "nested 100000 levels deep")
    with pytest.raises(ProblemError, match="nested"):
        load_problem(deep)


def test_file_over_its_size_limit(tmp_path: Path) -> None:
    big = _write(tmp_path, "config.json", b" " * (4 * 2**20 + 1))
    _fails(["model", str(big)], "larger than 4 MiB")


def test_duplicate_keys_are_errors_naming_key_and_place(tmp_path: Path, small: Path) -> None:
    text = small.read_text().replace('"maxDevices": 4', '"maxDevices": 4, "maxDevices": 16')
    _fails(["info", str(_write(tmp_path, "w.json", text))], "duplicate key 'maxDevices'", "top-level object")
    raw = base_workload()
    text = json.dumps(raw).replace('"timePerSample": 1.3', '"timePerSample": 1.3, "timePerSample": 2')
    with pytest.raises(ProblemError, match=r"duplicate key 'timePerSample' in nodes\[0\].TMPCs\[\"1\"\]\[1\]"):
        load_problem(_write(tmp_path, "w2.json", text))
    with pytest.raises(PlanFormatError, match="duplicate key 'nodes' in stages"):
        load_plan(_write(tmp_path, "p.json", json.dumps(base_plan()).replace('"nodes": [0, 1]', '"nodes": [0], "nodes": [0, 1]')))
    with pytest.raises(ModelConfigError, match="duplicate key 'hidden_size'"):
        load_hf_config(_write(tmp_path, "c.json", json.dumps(base_hf()).replace('"hidden_size": 256', '"hidden_size": 256, "hidden_size": 512')))


def test_cluster_numbers_past_their_limits(tmp_path: Path) -> None:
    for key, value, words in (("maxDevices", 1e308, "<= 2147483647"), ("mbsInBatch", 2**31, "<= 2147483647"),
                              ("bandwidth", 1e-31, ">= 1e-30"), ("maxMemoryPerDevice", 1e31, "<= 1e+30")):
        raw = base_workload()
        raw[key] = value
        with pytest.raises(ProblemError, match=re.escape(f"{key}: must be {words}")):
            problem_from_dict(raw)


def test_every_time_1e308_is_refused_at_load_so_no_solver_sees_it(tmp_path: Path) -> None:
    raw = base_workload()
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                c["timePerSample"] = 1e308
    path = _write(tmp_path, "huge.json", raw)
    for solver in ("cpsat", "milp", "milp-highs"):
        _fails(["solve", str(path), "--solver", solver, "--quiet"], "timePerSample: must be <= 1e+30")


def test_numbers_that_do_not_fit_a_float_or_are_not_json(tmp_path: Path) -> None:
    for literal, words in (("1e999", "overflows a float"), ("NaN", "not a JSON number"),
                           ("-Infinity", "not a JSON number"), ("1e-999", "underflows to zero")):
        with pytest.raises(ProblemError, match=words):
            parse_json('{"a": ' + literal + "}", ProblemError, "f")


def test_hf_field_types_are_checked_and_named() -> None:
    for key, value in (("head_dim", {"a": 1}), ("hidden_act", ["silu"]), ("model_type", 3), ("attention_bias", "yes"),
                       ("num_hidden_layers", 10**30), ("hidden_size", "256")):
        with pytest.raises(ModelConfigError, match=key):
            config_from_hf({**base_hf(), key: value})


# ---- 2. silently wrong ------------------------------------------------------------------


@pytest.mark.parametrize("extra, key, words", [
    ({"num_local_experts": 8}, "needs", "num_experts_per_tok"),
    ({"num_local_experts": 8.0, "num_experts_per_tok": 2}, "num_local_experts", "integer"),
    ({"num_local_experts": "8", "num_experts_per_tok": 2}, "num_local_experts", "integer"),
    ({"num_experts": 60, "num_experts_per_tok": 2.0}, "num_experts_per_tok", "integer"),
    ({"ffn_config": {"moe_num_experts": 16}}, "ffn_config.moe_num_experts", "mixture-of-experts key"),
    ({"text_config": {"num_local_experts": 16}}, "text_config.num_local_experts", "mixture-of-experts key"),
    ({"num_experts_per_tok": 2}, "num_experts_per_tok", "without an expert count"),
    ({"num_experts": "many"}, "num_experts", "integer"),
    ({"n_routed_experts": 8, "num_experts_per_tok": 2, "n_expert_groups": 4}, "n_expert_groups", "does not know"),
    ({"n_routed_experts": 8, "num_experts_per_tok": 9}, "top_k", "<= experts"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": [1]}, "mlp_only_layers", "empty"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "scoring_func": 3}, "scoring_func", "string"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "scoring_func": "relu"}, "scoring_func", "softmax"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": "3"}, "first_k_dense_replace", "integer"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": 0}, "layer_freq", ">= 1"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1.0}, "n_shared_experts", "integer"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": True}, "moe_intermediate_size", "whole"),
    ({"kv_lora_rank": "512", "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}, "kv_lora_rank",
     "whole"),
    ({"kv_lora_rank": 512, "qk_nope_head_dim": 64, "v_head_dim": 64}, "missing key", "qk_rope_head_dim"),
])
def test_bad_moe_configs_are_refused_naming_the_key(extra: dict, key: str, words: str) -> None:
    with pytest.raises(ModelConfigError, match=f"{key}.*{words}"):
        config_from_hf({**base_hf(), **extra})


def test_dense_configs_with_expert_keys_of_one_or_null_still_load() -> None:
    for extra in ({"num_experts": 1}, {"num_local_experts": None}, {"num_experts": 0}):
        config_from_hf({**base_hf(), **extra})


def test_invalid_warm_start_is_an_error(tmp_path: Path, small: Path) -> None:
    plan = base_plan()
    plan["stages"][0]["TMPCids"]["0"] = "bogus"
    _fails(["solve", str(small), "--solver", "milp", "--warm-start", str(_write(tmp_path, "p.json", plan))],
           "--warm-start", "not a valid plan", "bogus")


def test_misspelt_exclude_tmpc_is_an_error(small: Path) -> None:
    _fails(["solve", str(small), "--exclude-tmpc", "vanila"], "'vanila'", "did you mean 'vanilla'", "'activation recomp'")


def test_unknown_plan_and_stage_keys_are_named() -> None:
    with pytest.raises(PlanFormatError, match="unknown key 'stage'"):
        load_plan({**base_plan(), "stage": []})
    plan = base_plan()
    plan["stages"][0]["dataParalelDegree"] = 2
    with pytest.raises(PlanFormatError, match="stage 1: unknown key 'dataParalelDegree'"):
        load_plan(plan)


# ---- 3. one way in for every flag -------------------------------------------------------


@pytest.mark.parametrize("value, words", [("10^20", "expected a whole number"), ("100000000000000000000", "<= 2147483647"),
                                          (str(2**62), "<= 2147483647"), ("0", ">= 1"), ("9" * 5000, "5000 digits")])
def test_device_counts_that_overflow_the_kernels(small: Path, value: str, words: str) -> None:
    _fails(["solve", str(small), "-k", value], "--devices/-k", words)


@pytest.mark.parametrize("argv", [["-M", "-1GB"], ["-M=-1GB"], ["--memory=-1GB"], ["-M", "0"]])
def test_negative_sizes_say_must_be_positive(small: Path, argv: list[str]) -> None:
    _fails(["solve", str(small), *argv], "must be > 0")


def test_infinite_time_limits(small: Path) -> None:
    from experiments.compare.cli import cli

    _fails(["solve", str(small), "--time-limit", "inf"], "finite")
    _fails([str(small), "--time-limit", "inf"], "finite", main=cli, prog="python -m experiments.compare")
    _fails([str(small), "--hard-timeout", "inf"], "finite", main=cli, prog="python -m experiments.compare")
    _fails([str(small), "--rtol", "inf"], "finite", main=cli, prog="python -m experiments.compare")


def test_picture_formats_refused_before_the_solve(tmp_path: Path, small: Path) -> None:
    plan = _write(tmp_path, "p.json", base_plan())
    _fails(["solve", str(small), "--png", str(tmp_path / "plan.txt")], ".txt", ".png, .svg, .pdf")
    for suffix in (".txt", ".bmp", ".html"):
        _fails(["show", str(plan), str(small), "--out", str(tmp_path / f"plan{suffix}")], suffix)


def test_misspelt_names_get_did_you_mean(small: Path) -> None:
    _fails(["model", "llama3-8bb"], "did you mean 'llama3-8b'")
    _fails(["model", "llama3-8b", "--gpu", "h10"], "did you mean")
    _fails(["solve", str(small), "--solver", "cpsatt"], "did you mean 'cpsat'")


def test_output_paths_checked_before_any_work(tmp_path: Path, small: Path) -> None:
    before = small.read_text()
    _fails(["solve", str(small), "--out", str(small)], "input", "refusing to overwrite")
    assert small.read_text() == before
    _fails(["solve", str(small), "--out", ""], "--out: an empty path")
    for flag in ("--out", "--png"):
        start = time.perf_counter()
        name = "x.json" if flag == "--out" else "x.png"
        _fails(["solve", str(small), "--solver", "brute", flag, f"/proc/{name}"], flag, "not writable")
        assert time.perf_counter() - start < 30  # refused up front, not after a solve
    _fails(["plan", "megatron-1.7b", "--out", str(tmp_path / "x.json"), "--plan-out", str(tmp_path / "x.json")],
           "--out and --plan-out name the same file")
    _fails(["plan", "megatron-1.7b", "--plan-out", "/proc/x.json"], "--plan-out", "not writable")
    config = _write(tmp_path, "config.json", base_hf())
    _fails(["model", str(config), "--out", str(config)], "refusing to overwrite")


def test_experiments_out_dir_refuses_the_empty_path(small: Path) -> None:
    from experiments.compare.cli import cli

    _fails([str(small), "--out", ""], "empty path", main=cli, prog="python -m experiments.compare")


# ---- 4. DP set-up that scales with the flags -----------------------------------------------


def test_candidates_compute_divisors_directly() -> None:
    problem = problem_from_dict(base_workload()).with_cluster(devices=10**9, microbatches=10**9)
    start = time.perf_counter()
    cand = candidates(problem)
    assert time.perf_counter() - start < 5
    assert cand.ds == divisors_up_to(10**9, 10**9) and cand.ds[-1] == 10**9 and len(cand.ds) == 100
    assert divisors_up_to(12, 5) == (1, 2, 3, 4)


def test_huge_k_with_few_microbatches_solves(small: Path) -> None:
    rc, out, err, _ = call(piper_main, ["solve", str(small), "-k", "2147483647", "--json", "--quiet"], PROG)
    assert rc == 0 and json.loads(out)["status"] == "optimal", err


def test_ideal_count_under_a_raised_cap_stops_at_the_time_limit(tmp_path: Path) -> None:
    n = 40  # 40 independent layers into one sink: 2^40 + 1 ideals
    nodes = [{"id": i, "TMPCs": {"1": [{"id": "v", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 0,
                                         "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {str(n): 0}}]}}
             for i in range(n)]
    nodes.append({"id": n, "TMPCs": {"1": [{"id": "v", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 0,
                                            "memoryUsageB": 0, "syncTimeFw": {str(i): 0 for i in range(n)},
                                            "syncTimeBw": {}}]}})
    raw = {"maxDevices": 4, "maxMemoryPerDevice": 1e9, "bandwidth": 1e9, "mbsInBatch": 4, "nodes": nodes,
           "edges": [{"sourceId": i, "destId": n, "communicationCost": 0} for i in range(n)]}
    path = _write(tmp_path, "wide.json", raw)
    for extra in ([], ["--uniform"]):
        rc, out, err, took = call(piper_main, ["solve", str(path), "--max-ideals", "2000000000", "--time-limit", "2",
                                               "--json", *extra], PROG)
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["status"] == "unknown" and "enumerating ideals" in doc["message"]
        assert took < 2 + 60


def test_front_end_refuses_100000_layers_with_an_estimate(tmp_path: Path) -> None:
    config = _write(tmp_path, "config.json", {**base_hf(), "num_hidden_layers": 100_000})
    _fails(["model", str(config)], "100000 transformer layers", "cap of 1024", "--max-layers 100000")


# ---- 5. certificates ----------------------------------------------------------------------


def test_optimal_needs_a_finite_tolerance_and_value() -> None:
    problem = problem_from_dict(base_workload())
    plan = Plan((Stage((0, 1, 2, 3), 1, 1, {v: "vanilla" for v in range(4)}),))
    res = make_result(problem, "milp", Status.OPTIMAL, plan, time_s=0.1, objective=4.0, tolerance=math.inf)
    assert res.status == Status.FEASIBLE and "not certified optimal" in res.message
    assert not check_result(problem, Options(), res)
    with pytest.raises(SolverError, match="claims an optimum with no plan"):
        make_result(problem, "milp", Status.OPTIMAL, None, time_s=0.1)
    forged = Result("milp", Status.OPTIMAL, plan, res.tps, res.tps, res.tps, 0.1, res.score, tolerance=math.inf)
    assert any(i.check == "status" and "tolerance" in i.message for i in check_result(problem, Options(), forged))


def test_exact_models_refuse_coefficients_they_cannot_represent() -> None:
    from piper import solve

    raw = base_workload()
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                c["parameterSize"] = 1e30
    problem = problem_from_dict(raw)
    for solver in ("cpsat", "milp-highs"):
        with pytest.raises(SolverError, match="cannot represent"):
            solve(problem, Options(time_limit_s=5), solver)


def test_memory_error_in_a_solver_is_an_unknown_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from piper.solvers import registry

    def boom(problem, options):
        raise MemoryError("Unable to allocate 44.7 GiB")

    info = registry.SolverInfo("boom", "x:y", True, "test")
    monkeypatch.setattr(registry.SolverInfo, "load", lambda self: boom)
    res = info(problem_from_dict(base_workload()), Options())
    assert res.status == Status.UNKNOWN and res.plan is None and res.message.startswith("out of memory")


# ---- 6. minor -----------------------------------------------------------------------------


def test_compare_reports_are_0644_and_a_reused_out_is_cleared(tmp_path: Path, small: Path) -> None:
    from experiments.compare.cli import cli

    out = tmp_path / "cmp"
    (out / "failed").mkdir(parents=True)
    (out / "failed" / "old.json").write_text("{}")
    (out / "times.png").write_text("old")
    (out / "mine.txt").write_text("kept")
    old = os.umask(0o022)
    try:
        rc, _, err, _ = call(cli, [str(small), "--solvers", "dp,brute", "--time-limit", "5", "--hard-timeout", "0",
                                   "--no-plots", "--quiet", "--out", str(out)], "python -m experiments.compare")
    finally:
        os.umask(old)
    assert rc == 0, err
    assert stat.S_IMODE((out / "report.json").stat().st_mode) == 0o644
    assert not (out / "failed").exists() and not (out / "times.png").exists()
    assert (out / "mine.txt").read_text() == "kept"


def test_one_warning_per_misspelt_key_and_place_kind() -> None:
    raw = base_workload(n=300)
    for nd in raw["nodes"]:
        nd["flops"] = 1
        for lst in nd["TMPCs"].values():
            for c in lst:
                c["memoryUsageSharded"] = 0
    problem = problem_from_dict(raw)
    assert len(problem.unknown_keys) == 2
    assert problem.unknown_keys[0].startswith("unknown key 'flops' at node 0 and 299 more nodes (known:")
    assert problem.unknown_keys[1].startswith("unknown key 'memoryUsageSharded' at node 0 t=1 TMPCs[0] (TMPC 'vanilla') "
                                              "and 899 more TMPCs (known:")


def test_repeated_dp_progress_line_is_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    from piper.dp.limits import Progress

    for _ in range(33):
        Progress(True).say("36 ideals, 630 ideal pairs", force=True)
    assert capsys.readouterr().err.count("ideal pairs") == 1


def test_unreachable_ray_address_is_one_line_quickly() -> None:
    from piper.solvers.execution import probe_ray_address

    start = time.perf_counter()
    with pytest.raises(UsageError, match="cannot reach the Ray cluster at '127.0.0.1:1'"):
        probe_ray_address("127.0.0.1:1", timeout_s=5)
    assert time.perf_counter() - start < 30
    probe_ray_address("auto")  # left to Ray


def test_plan_json_round_trips_with_record(tmp_path: Path, small: Path) -> None:
    out = tmp_path / "plan.json"
    rc, _, err, _ = call(piper_main, ["solve", str(small), "--out", str(out), "--quiet"], PROG)
    assert rc == 0, err
    assert load_plan(out).stages
    assert copy.deepcopy(json.loads(out.read_text()))["madeFor"]["record"] == 1


# ---- named pipes: never waited for --------------------------------------------------------

def _piper_in_a_process(argv: list[str]) -> "subprocess.CompletedProcess[str]":
    """Run ``python -m piper ARGV`` in its own process (a hang ends the test, not the suite)."""
    return subprocess.run([sys.executable, "-m", "piper", *argv], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2], stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_nobody_writes_is_one_line_not_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import piper.io.jsonfile

    monkeypatch.setattr(piper.io.jsonfile, "FIFO_WAIT_S", 0.2)
    fifo = tmp_path / "hw.fifo"
    os.mkfifo(fifo)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            load_problem(fifo)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            raised.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "the reader waits for a writer that never comes"
    assert isinstance(raised[0], ProblemError)
    assert str(raised[0]) == (f"cannot read workload file {str(fifo)!r}: a named pipe (FIFO) that gave no data "
                              "within 0.2 s (no process writes to it?)")
    done = _piper_in_a_process(["score", "megatron-1.7b", "--gpu", "a100-80gb", "--nodes", "1", "--tp", "1",
                                "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--recompute", "none",
                                "--out", str(fifo)])
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        f"piper: error: --out {fifo}: a named pipe (FIFO); piper writes its output to a file "
        "(a shell's >(...) works)"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_with_a_late_writer_is_read_as_a_file(tmp_path: Path, small: Path) -> None:
    import threading

    fifo = tmp_path / "w.fifo"
    os.mkfifo(fifo)
    text = small.read_bytes()

    def feed() -> None:
        time.sleep(0.5)  # the reader is already waiting: it must wait for this writer, not see an empty pipe
        with open(fifo, "wb") as fh:
            fh.write(text[:100])
            fh.flush()
            time.sleep(0.2)
            fh.write(text[100:])

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    loaded = load_problem(fifo)
    writer.join(timeout=60)
    assert loaded == load_problem(small)


def test_stdout_is_no_output_path_and_a_held_pipe_is(tmp_path: Path) -> None:
    score = ["score", "megatron-1.7b", "--gpu", "a100-80gb", "--nodes", "1", "--tp", "1", "--pp", "1",
             "--micro-batch", "1", "--global-batch", "8", "--recompute", "none"]
    # /dev/stdout is where the report (or --json's one object) goes: refused, not mixed into it
    done = _piper_in_a_process([*score, "--json", "--plan-out", "/dev/stdout"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "piper: error: --plan-out /dev/stdout: is this command's standard output, where it prints its report "
        "(--json: its JSON object); write to a file or a shell's >(...)"]
    # a pipe the process holds that is not stdout (a shell's >(...)) is written
    out = tmp_path / "plan.json"
    shell = (f"{sys.executable} -m piper {' '.join(score)} --plan-out >(cat > {out}) > /dev/null; "
             f"wait; sleep 1")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert '"madeFor"' in out.read_text()


def test_a_plan_from_a_pipe_is_read_once(tmp_path: Path) -> None:
    w, p = tmp_path / "w.json", tmp_path / "p.json"
    done = _piper_in_a_process(["score", "megatron-1.7b", "--gpu", "a100-80gb", "--nodes", "1", "--tp", "1",
                                "--micro-batch", "1", "--global-batch", "8", "--recompute", "none", "--out", str(w),
                                "--plan-out", str(p)])
    assert done.returncode == 0, done.stderr
    # /dev/stdin is a pipe here: the plan is read once (the madeFor check used to read it again: empty)
    done = subprocess.run([sys.executable, "-m", "piper", "evaluate", str(w), "/dev/stdin"], input=p.read_text(),
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "stage" in done.stdout
    done = subprocess.run([sys.executable, "-m", "piper", "info", "/dev/stdin"], input="",
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2
    assert "a named pipe (FIFO) whose writer closed it without writing anything" in done.stderr


def test_paths_that_cannot_be_looked_at_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the session runs as root, which reads any directory: the refusal is simulated
    real = Path.is_dir

    def no_search(self: Path) -> bool:
        if "locked" in str(self):
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "is_dir", no_search)
    _fails(["model", str(tmp_path / "locked"), "--gpu", "a100-80gb"],
           f"cannot read model config '{tmp_path / 'locked'}': Permission denied")
    _fails(["model", "megatron-1.7b", "--gpu", "a100-80gb", "--out", str(tmp_path / "locked" / "o.json")],
           f"--out {tmp_path / 'locked' / 'o.json'}: not writable (Permission denied)")


def test_model_arguments_name_presets_paths_and_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    own = tmp_path / "megatron-1.7b"
    own.mkdir()
    _write(own, "config.json", base_hf())
    rc, out, err, _ = call(piper_main, ["model", "megatron-1.7b", "--gpu", "a100-80gb", "--json"], PROG)
    assert rc == 0 and json.loads(out)["params"] > 1e9  # the preset, not the small folder of its name
    rc, out, err, _ = call(piper_main, ["model", "./megatron-1.7b", "--gpu", "a100-80gb", "--json"], PROG)
    assert rc == 0 and json.loads(out)["params"] < 1e8  # the folder, named as a path
    (tmp_path / "dir" / "config.json").mkdir(parents=True)
    _fails(["model", "dir", "--gpu", "a100-80gb"], "dir/config.json: a directory, not a config file")
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "config.json").symlink_to(tmp_path / "missing.json")
    _fails(["model", "dl", "--gpu", "a100-80gb"], "dl/config.json: a dangling link")
    _fails(["model", "./nothing-here", "--gpu", "a100-80gb"], "./nothing-here: no such file or directory")
    _fails(["model", "megatron-1.7b/config.json/", "--gpu", "a100-80gb"], "megatron-1.7b/config.json/: not a directory")


def test_recompute_flags_say_what_they_do(tmp_path: Path) -> None:
    _fails(["plan", "megatron-1.7b", "--recompute", "full"], "--recompute full: plan searches the recomputation")
    done = _piper_in_a_process(["score", "--help"])
    assert "recomputation of every transformer layer (default none)" in " ".join(done.stdout.split())
    base = ["score", "gpt-oss-120b", "--gpu", "h100", "--nodes", "8", "--tp", "1", "--pp", "4", "--ep", "8",
            "--micro-batch", "1", "--global-batch", "64", "--recompute", "selective", "--json"]
    rc, out, err, _ = call(piper_main, [*base, "--recompute-modules", "moe_act", "--recompute-modules", "layernorm"],
                           PROG)
    assert rc == 0, err
    assert json.loads(out)["recompute_modules"] == ["layernorm", "moe_act"]  # repeated flags add up
    line = _fails([*base, "--recompute-modules", "x" * 100], "unknown module")
    assert "'" + "x" * 60 + "'..." in line  # cut with its quote closed
    # a workload's recomputeModules the model has no use for is refused by export, as by the front end
    w, p = tmp_path / "w.json", tmp_path / "p.json"
    rc, out, err, _ = call(piper_main, [*base[:-1], "--out", str(w), "--plan-out", str(p)], PROG)
    assert rc == 0, err
    doc = json.loads(w.read_text())
    doc["model"]["recomputeModules"] = ["mla_up_proj"]
    w.write_text(json.dumps(doc))
    _fails(["export", str(p), str(w), "--to", "megatron"],
           "the workload's model.recomputeModules: recompute module 'mla_up_proj' recomputes nothing in gpt-oss-120b")
    _fails(["export", str(p), str(w), "--to", "deepspeed", "--out", "/dev/null"],
           "--out /dev/null: not a regular file; DeepSpeed's export writes two files")


def test_a_models_directory_is_read_through_its_config_json(tmp_path: Path) -> None:
    from piper.frontend.presets import load_model

    model_dir = tmp_path / "tiny-llama"
    model_dir.mkdir()
    _write(model_dir, "config.json", base_hf())
    assert load_model(str(model_dir)) == load_model(str(model_dir / "config.json"))
    rc, out, err, _ = call(piper_main, ["model", str(model_dir), "--gpu", "a100-80gb", "--nodes", "1", "--json"], PROG)
    assert rc == 0, err
    assert json.loads(out)["model"] == "tiny-llama"
    _fails(["model", str(model_dir), "--gpu", "a100-80gb", "--nodes", "1", "--out", str(model_dir / "config.json")],
           "refusing to overwrite")
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails(["model", str(empty), "--gpu", "a100-80gb", "--nodes", "1"],
           f"{empty}: a directory without a config.json")
