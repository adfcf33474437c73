"""The fuzz properties, one function per entry point; tests/fuzz/test_fuzz.py runs each briefly
(CI) and, with ``-m slow``, for minutes (tests/fuzz/test_fuzz_slow.py).

Every property: the entry point returns a result, or raises one of the project's user errors
(:data:`piper.core.errors.USER_ERRORS`; on the command line: exit status 2 and one error line
on stderr), within its time limit plus :data:`~tests.fuzz.inputs.MARGIN_S`; any other exception
fails the test (hypothesis shrinks it to a small example)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from piper import (
    Options,
    check_result,
    evaluate,
    load_plan,
    load_problem,
    plan_from_dict,
    problem_from_dict,
    solve,
)
from piper.cli.main import main as piper_main
from piper.core.errors import (
    USER_ERRORS,
    HardwareError,
    ModelConfigError,
    PlanError,
    PlanFormatError,
    ProblemError,
)
from piper.core.result import Result, Status
from piper.frontend.hardware import Hardware, hardware_from_file
from piper.frontend.hf import config_from_hf, load_hf_config
from tests.fuzz.inputs import (
    EXTREME_NUMBERS,
    FLAG_VALUES,
    MARGIN_S,
    assert_contract,
    base_hardware,
    base_hf,
    base_plan,
    base_workload,
    call,
    corrupted_text,
    mutated,
)

WORKDIR = Path(tempfile.mkdtemp(prefix="piper-fuzz-"))
SMALL = WORKDIR / "small.json"
SMALL.write_text(json.dumps(base_workload()))
PLAN = WORKDIR / "plan.json"
PLAN.write_text(json.dumps(base_plan()))
HF = WORKDIR / "config.json"
HF.write_text(json.dumps(base_hf()))

V2_KEYS = ("devicesPerNode", "intraNodeBandwidth", "allReduceFactor", "memoryUsageShardedB", "layerIndex", "kind",
           "expertParallel", "expertTensorParallel", "expertParameterSize", "memoryUsageShardedExpertB")
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
            "head_dim", "hidden_act", "model_type", "tie_word_embeddings", "attention_bias", "ffn_config")
HW_KEYS = ("peak_flops", "memory_bytes", "devices_per_node", "nvlink_bandwidth", "network_bandwidth", "node", "name")

_counter = [0]


def _file(data: bytes | str, suffix: str = ".json") -> Path:
    _counter[0] += 1
    path = WORKDIR / f"f{_counter[0]}{suffix}"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


# ---- the API --------------------------------------------------------------------------


def workload_dict(raw: Any) -> None:
    try:
        problem_from_dict(raw)
    except ProblemError:
        pass


def workload_file(data: bytes) -> None:
    try:
        load_problem(_file(data))
    except ProblemError as exc:
        assert "\n" not in str(exc)


def plan_input(raw: Any, data: bytes) -> None:
    problem = load_problem(SMALL)
    for source in (raw, _file(data)):
        try:
            plan = load_plan(source) if isinstance(source, Path) else plan_from_dict(source)
        except PlanFormatError as exc:
            assert "\n" not in str(exc)
            continue
        try:
            evaluate(problem, plan)
        except PlanError:
            pass


def hf_config(raw: Any, data: bytes) -> None:
    said: list[str] = []  # the reader's warnings: each one line, as its errors
    for make in (lambda: config_from_hf(raw, warn=said.append), lambda: load_hf_config(_file(data), warn=said.append)):
        try:
            make()
        except ModelConfigError as exc:
            assert "\n" not in str(exc)
    assert all("\n" not in line for line in said)


def hardware_file(data: bytes) -> None:
    try:
        assert isinstance(hardware_from_file(_file(data)), Hardware)
    except HardwareError as exc:
        assert "\n" not in str(exc)


def solve_api(raw: Any, solver: str, limit: float) -> None:
    """piper.solve on a workload that loads: a sound Result (no 'optimal' without a finite
    value and tolerance) within the limit plus the margin, or a user error."""
    try:
        problem = problem_from_dict(raw)
    except ProblemError:
        return
    options = Options(time_limit_s=limit)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = solve(problem, options, solver)
    except USER_ERRORS:
        return
    assert time.perf_counter() - start <= limit + MARGIN_S
    assert isinstance(result, Result)
    if result.status == Status.OPTIMAL:
        assert math.isfinite(result.tolerance) and math.isfinite(result.value)
    issues = [i for i in check_result(problem, options, result) if i.check == "status"]
    assert not issues, issues


# ---- the command lines ------------------------------------------------------------------

#: the numeric and path flags of ``solve``, with what a value of each is
SOLVE_FLAGS = ("-k", "-M", "-N", "-B", "-G", "--intra-node-bandwidth", "--allreduce-factor", "--time-limit",
               "--threads", "--max-virtual-stages", "--exclude-tmpc", "--out", "--png", "--objective")
SOLVERS = ("dp", "dp-greedy", "brute", "equi")


@st.composite
def solve_argv(draw: st.DrawFn, solvers: tuple[str, ...] = SOLVERS) -> tuple[list[str], float]:
    limit = draw(st.sampled_from([0.5, 1.0, 2.0]))
    argv = ["solve", str(SMALL), "--solver", draw(st.sampled_from(solvers)), "--time-limit", str(limit), "--quiet"]
    for _ in range(draw(st.integers(1, 3))):
        flag = draw(st.sampled_from(SOLVE_FLAGS))
        value = draw(FLAG_VALUES)
        if flag in ("--out", "--png"):
            value = draw(st.sampled_from(["", "/proc/x.json", str(SMALL), str(WORKDIR), str(WORKDIR / "o.txt"),
                                          str(WORKDIR / "o.png"), str(WORKDIR / "no" / "o.json")]))
        argv += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    if draw(st.booleans()):
        argv.append("--json")
    return argv, limit


def solve_cli(argv: list[str], limit: float, main: Any = piper_main, prog: str = "piper") -> None:
    rc, out, err, took = call(main, argv, prog)
    assert_contract(rc, out, err, prog, json_out="--json" in argv)
    assert took <= limit + MARGIN_S, (argv, took)


@st.composite
def file_argv(draw: st.DrawFn) -> list[str]:
    """A command reading a corrupted workload or plan file."""
    workload = _file(draw(corrupted_text(draw(mutated(base_workload(), V2_KEYS)))))
    plan = _file(draw(corrupted_text(draw(mutated(base_plan(), ("schedule", "madeFor"))))))
    command = draw(st.sampled_from(["info", "evaluate", "show", "export", "solve"]))
    if command == "info":
        return ["info", str(workload), "--json"]
    if command == "evaluate":
        return ["evaluate", str(workload), str(plan)]
    if command == "show":
        return ["show", str(plan), str(workload), "--out", str(WORKDIR / "p.png")]
    if command == "export":
        return ["export", str(plan), str(workload), "--to", draw(st.sampled_from(["megatron", "deepspeed", "torchtitan"]))]
    return ["solve", str(workload), "--time-limit", "1", "--quiet"]


def file_cli(argv: list[str]) -> None:
    rc, out, err, took = call(piper_main, argv, "piper")
    assert_contract(rc, out, err, "piper", json_out="--json" in argv)
    assert took <= 1 + MARGIN_S, (argv, took)


MODEL_FLAGS = ("--micro-batch", "--global-batch", "--seq", "--efficiency", "--nodes", "--peak-flops", "--memory",
               "--memory-reserve", "--devices-per-node", "--nvlink-bandwidth", "--network-bandwidth", "--max-layers",
               "--gpu", "--node-type")


@st.composite
def model_argv(draw: st.DrawFn) -> list[str]:
    """``model`` on a corrupted config or a preset, with hostile flag values."""
    source = draw(st.sampled_from(["preset", "file", "hardware"]))
    if source == "preset":
        argv = ["model", draw(st.sampled_from(["megatron-1.7b", "llama3-8b", "llama3-8bb", "gpt3", ""]))]
    else:
        cfg = _file(draw(corrupted_text(draw(mutated(base_hf(), MOE_KEYS)))))
        argv = ["model", str(cfg)]
    if source == "hardware":
        argv += ["--hardware", str(_file(draw(corrupted_text(draw(mutated(base_hardware(), HW_KEYS))))))]
    for _ in range(draw(st.integers(0, 2))):
        value = draw(FLAG_VALUES)
        argv += [f"{draw(st.sampled_from(MODEL_FLAGS))}={value}"]
    return argv + ["--json"]


def model_cli(argv: list[str]) -> None:
    rc, out, err, _ = call(piper_main, argv, "piper")
    assert_contract(rc, out, err, "piper", json_out=True)


#: ``score``'s layout flags with a value (issues 30, 31), its switches, and values a layout takes
SCORE_FLAGS = ("--tp", "--cp", "--pp", "--dp", "--vp", "--ep", "--etp", "--cp-comm-type", "--micro-batch", "--seq",
               "--global-batch", "--recompute", "--precision", "--token-dispatcher", "--nodes", "--memory-reserve")
SCORE_SWITCHES = ("--sequence-parallel", "--overlap-grad-reduce", "--overlap-param-gather", "--shard-gradients",
                  "--tp-comm-overlap", "--no-flash-attention", "--account-for-embedding-in-pipeline-split",
                  "--account-for-loss-in-pipeline-split")
SCORE_VALUES = st.sampled_from(["1", "2", "4", "8", "16", "3", "p2p", "a2a", "allgather", "a2a+p2p", "any", "none", "selective",
                                "full", "fp8", "bf16", "flex", "alltoall", "4096", "65536", "131072", "1GB"])


@st.composite
def score_argv(draw: st.DrawFn) -> list[str]:
    """``score`` on a preset (dense, MoE, MLA, sliding windows) with layout flags that often do not
    fit together (context, expert and pipeline sizes, schemes) and hostile values."""
    model = draw(st.sampled_from(["llama3-8b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3", "mixtral-8x7b"]))
    argv = ["score", model, "--gpu", "h100", "--nodes", "2", "--tp", "1", "--global-batch", "64"]
    for _ in range(draw(st.integers(1, 5))):
        value = draw(st.one_of(SCORE_VALUES, SCORE_VALUES, FLAG_VALUES))
        argv += [f"{draw(st.sampled_from(SCORE_FLAGS))}={value}"]
    argv += draw(st.lists(st.sampled_from(SCORE_SWITCHES), max_size=3, unique=True))
    if draw(st.booleans()):
        argv += ["--hierarchical-context-parallel-sizes", draw(SCORE_VALUES), draw(st.one_of(SCORE_VALUES, FLAG_VALUES))]
    return argv + ["--json"]


def score_cli(argv: list[str]) -> None:
    """A score, one JSON object, or one error line (exit 2); never a traceback, within the margin."""
    rc, out, err, took = call(piper_main, argv, "piper")
    assert_contract(rc, out, err, "piper", json_out=True)
    assert took <= 30 + MARGIN_S, (argv, took)


#: experiments commands: (main, leading argv, the flags of each kind)
def _experiment_mains() -> list[tuple[str, Any, list[str]]]:
    from experiments import bench, bench_backends, bench_exact, bench_exact_workloads
    from experiments.compare.cli import cli as compare_cli
    from experiments.megatron.cli import main as megatron_main
    from experiments.paper.cli import main as paper_main

    return [("compare", compare_cli, []), ("bench", bench.main, ["dp"]), ("bench_exact", bench_exact.main, []),
            ("bench_exact_workloads", bench_exact_workloads.main, []), ("bench_backends", bench_backends.main, []),
            ("megatron", megatron_main, []), ("paper", paper_main, [])]


#: values no flag of its kind accepts, so that no command starts its work
INVALID = {
    "--time-limit": ["inf", "-inf", "nan", "1e400", "-1", "0", "", "abc", "1e8", "Infinity"],
    "--jobs": ["0", "-1", "", "abc", "1.5", "9" * 50, "10^20", "inf"],
    "--out": [""],
}


@st.composite
def experiment_argv(draw: st.DrawFn) -> tuple[str, Any, list[str]]:
    name, main, lead = draw(st.sampled_from(_experiment_mains()))
    flag = draw(st.sampled_from(sorted(INVALID)))
    value = draw(st.sampled_from(INVALID[flag]))
    return name, main, [*lead, f"{flag}={value}"]


def experiment_cli(name: str, main: Any, argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    prog = err.getvalue().split(": error: ")[0] if ": error: " in err.getvalue() else name
    assert rc == 2, (name, argv, rc, err.getvalue()[-500:])
    assert_contract(rc, out.getvalue(), err.getvalue(), prog)


def compare_run(argv_tail: list[str], limit: float) -> None:
    """experiments.compare on the small workload with hostile cluster flags: exit 0/1 (its
    checks) or 2, within the limit per solve times the solvers plus the margin."""
    from experiments.compare.cli import cli as compare_cli

    argv = [str(SMALL), "--solvers", "dp,brute,equi", "--time-limit", str(limit), "--hard-timeout", "0",
            "--no-plots", "--quiet", "--out", str(WORKDIR / "compare"), *argv_tail]
    rc, _, err, took = call(lambda a: compare_cli(a), argv, "python -m experiments.compare")
    assert "Traceback" not in err, err
    assert rc in (0, 1, 2), (rc, err[-500:])
    if rc == 2:
        assert len([line for line in err.splitlines() if ": error: " in line]) == 1, err
    assert took <= 3 * limit + MARGIN_S


def extreme_workload(draw: st.DrawFn) -> dict[str, Any]:
    """The small workload with every number of one field set to one value at or past its limit."""
    raw = base_workload()
    field = draw(st.sampled_from(["timePerSample", "parameterSize", "memoryUsageA", "memoryUsageB",
                                  "communicationCost", "maxDevices", "mbsInBatch", "bandwidth", "maxMemoryPerDevice",
                                  "allReduceFactor", "intraNodeBandwidth", "devicesPerNode"]))
    value = draw(EXTREME_NUMBERS)
    if field in ("maxDevices", "mbsInBatch", "bandwidth", "maxMemoryPerDevice", "allReduceFactor",
                 "intraNodeBandwidth", "devicesPerNode"):
        raw[field] = value
    elif field == "communicationCost":
        for e in raw["edges"]:
            e[field] = value
    else:
        for nd in raw["nodes"]:
            for lst in nd["TMPCs"].values():
                for c in lst:
                    c[field] = value
    return raw


extreme_workloads = st.composite(extreme_workload)
