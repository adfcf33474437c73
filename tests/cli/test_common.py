"""The shared command-line plumbing (piper.cli.common): sizes, the cluster and ablation
flags, the workload's warnings and --strict, and the error contract: a user error is exit
status 2 and one line on stderr, whatever the command."""

import argparse
import json
from pathlib import Path

import pytest

from piper.cli.common import add_ablation_args, options_from_args, parse_size
from piper.core.errors import UsageError
from tests.helpers import TWO_STAGE_PLAN, two_layer_workload, write_json

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "experiments" / "workloads" / "bert32a100.json")


@pytest.mark.parametrize("text, value", [
    ("8GiB", 8 * 2**30), ("8 GiB", 8 * 2**30), ("25GiB/s", 25 * 2**30), ("80e9", 80e9), ("1.5GB", 1.5e9),
    ("512MiB", 512 * 2**20), ("1024", 1024.0), ("2KB", 2000.0), ("2kB", 2000.0), ("3kiB", 3072.0), ("2tB", 2e12),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "8XB", "-1GiB", "0", "8 G i B"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


@pytest.mark.parametrize("text, message", [
    ("200Gb/s", "'200Gb/s': a lowercase b means bits and piper reads bytes (B): 200Gb/s is 25GB/s"),
    ("3gb", "3gb is 0.375GB"), ("8 kib", "8 kib is 1KiB"), ("16b", "16b is 2B"),
])
def test_a_lowercase_b_is_bits_and_refused(text, message):
    with pytest.raises(UsageError, match="lowercase b means bits") as err:
        parse_size(text)
    assert message in str(err.value)


def test_a_size_is_not_a_rate():
    assert parse_size("25GB/s", rate=True) == parse_size("25GB", rate=True) == parse_size("25GB/s") == 25e9
    with pytest.raises(UsageError, match="a size, not a rate: drop the '/s'"):
        parse_size("80GB/s", rate=False)
    assert parse_size("0GB", zero=True, rate=False) == 0.0
    for text in ("-0", "-0GB", "-0.0"):
        with pytest.raises(UsageError, match="a size takes no minus sign"):
            parse_size(text, zero=True)
    with pytest.raises(UsageError, match="TB, KiB, MiB, GiB, TiB"):
        parse_size("fast")


@pytest.mark.parametrize("flag, text, fragment", [
    ("--memory", "80GB/s", "argument --memory: bad size '80GB/s': a size, not a rate"),
    ("--memory-reserve", "3GB/s", "argument --memory-reserve: bad size '3GB/s': a size, not a rate"),
    ("--network-bandwidth", "200Gb/s", "200Gb/s is 25GB/s"),
])
def test_model_flags_refuse_rates_for_sizes_and_bits(cli, flag, text, fragment):
    r = cli("piper", "model", "llama3-8b", "--nodes", "2", flag, text)
    assert r.returncode == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_uniform_flag_sets_the_option():
    parser = argparse.ArgumentParser()
    add_ablation_args(parser)
    assert options_from_args(parser.parse_args(["--uniform"])).uniform is True
    assert options_from_args(parser.parse_args([])).uniform is False


@pytest.mark.parametrize("args, fragment", [
    (("piper", "info", "missing.json"), "cannot read"),
    (("piper", "info", BERT, "--memory", "lots"), "bad size"),
    (("piper", "info", BERT, "--devices", "0"), "must be >= 1"),
    (("piper", "frobnicate"), "invalid choice"),
    (("piper", "evaluate", BERT, "missing-plan.json"), "cannot read plan"),
    (("piper", "solve", BERT, "--solver", "nonesuch"), "unknown solver"),
])
def test_user_errors_exit_2_with_one_line(cli, args, fragment):
    r = cli(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in r.stderr


def test_invalid_problem_and_plan_exit_2(cli, tmp_path):
    bad = tmp_path / "w.json"
    raw = json.loads(Path(BERT).read_text())
    raw["edges"].append({"sourceId": 36, "destId": 0, "communicationCost": 1.0})
    bad.write_text(json.dumps(raw))
    r = cli("piper", "info", str(bad))
    assert r.returncode == 2 and "cycle" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"stages": [{"nodes": [0], "dataParallelDegree": 1, "tensorParallelDegree": 1,
                                            "TMPCids": {"0": "vanilla"}}]}))
    r = cli("piper", "evaluate", BERT, str(plan))
    assert r.returncode == 2 and "rule 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flags, fragment", [
    (("--devices-per-node", "0"), "--devices-per-node/-G: must be >= 1"),
    (("--devices-per-node", "2.5"), "--devices-per-node/-G: expected a whole number"),
    (("-G", "x"), "expected a whole number"),
    (("--intra-node-bandwidth", "0"), "--intra-node-bandwidth: bad size '0': must be > 0"),
    (("--intra-node-bandwidth", "fast"), "--intra-node-bandwidth: bad size"),
    (("--allreduce-factor", "0"), "--allreduce-factor: must be a finite number > 0"),
    (("--allreduce-factor", "-4"), "--allreduce-factor"),
    (("--allreduce-factor", "nan"), "--allreduce-factor: must be a finite number > 0"),
    (("--allreduce-factor", "four"), "--allreduce-factor: expected a number"),
])
@pytest.mark.parametrize("command", ["info", "evaluate", "solve"])
def test_bad_cluster_flag_values_exit_2_with_one_line(cli, tmp_path, flags, fragment, command):
    path = write_json(tmp_path, two_layer_workload())
    plan = [write_json(tmp_path, TWO_STAGE_PLAN, "p.json")] if command == "evaluate" else []
    args = [command, path, *plan, *flags]
    code, out, err = cli("piper", *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], err


def test_unknown_keys_warn_one_line_each_and_strict_makes_them_errors(cli, tmp_path):
    raw = two_layer_workload(intraNodeBandwith=20.0)
    raw["nodes"][0]["flops"] = 3
    path = write_json(tmp_path, raw)
    plan = write_json(tmp_path, TWO_STAGE_PLAN, "p.json")
    for args in (["info", path], ["evaluate", path, plan], ["solve", path, "-q"]):
        code, out, err = cli("piper", *args)
        assert code == 0, err
        lines = err.strip().splitlines()
        assert len(lines) == 2
        assert lines[0].startswith("piper: warning: unknown key 'intraNodeBandwith' at top level (known: ")
        assert lines[1].startswith("piper: warning: unknown key 'flops' at node 0 (known: ")
        code, out, err = cli("piper", *args, "--strict")
        assert code == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("piper: error: unknown key 'intraNodeBandwith' at top level")
    # a clean file: no warnings, and --strict is fine
    clean = write_json(tmp_path, two_layer_workload(devicesPerNode=8), "clean.json")
    code, out, err = cli("piper", "info", clean, "--strict")
    assert code == 0 and err == ""


@pytest.mark.parametrize("model, words", [
    ([1, 2], "the workload's 'model' must be an object, got list"),
    ({"name": "m", "bogusKey": 1}, "the workload's model record has an unknown key 'bogusKey'"),
    ({"name": "m"}, "the workload's 'model' has no "),
])
def test_a_bad_model_record_warns_and_strict_refuses_it(cli, tmp_path, model, words):
    """The front end's ``model`` record is read by export only; the other commands check it as export
    would: one warning line, with --strict exit 2 and one line naming the field."""
    path = write_json(tmp_path, two_layer_workload(model=model))
    plan = write_json(tmp_path, TWO_STAGE_PLAN, "p.json")
    for args in (["info", path], ["evaluate", path, plan], ["solve", path, "-q"]):
        code, out, err = cli("piper", *args)
        assert code == 0, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"piper: warning: {words}"), err
        code, out, err = cli("piper", *args, "--strict")
        assert code == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"piper: error: {path}: {words}"), err


def test_slow_intra_node_bandwidth_warns(cli, tmp_path):
    path = write_json(tmp_path, two_layer_workload(intraNodeBandwidth=1.0))
    code, _, err = cli("piper", "info", path)
    assert code == 0
    assert err.strip().splitlines() == [
        "piper: warning: intraNodeBandwidth 1 bytes/s is below bandwidth 2 bytes/s (inside a node is usually faster)"]
    plain = write_json(tmp_path, two_layer_workload(), "v1.json")
    code, _, err = cli("piper", "info", plain, "--intra-node-bandwidth", "1")
    assert code == 0 and "below bandwidth" in err


def test_load_saved_plan_warns_once_per_difference_after_prog_and_flag(tmp_path: Path, capsys) -> None:
    """evaluate, export, show and solve --warm-start load a saved plan through load_saved_plan:
    one warning line per difference from its madeFor record, --strict an error instead."""
    from piper import problem_from_dict
    from piper.cli.common import load_saved_plan
    from piper.core.errors import PlanRecordMismatch
    from piper.core.plan import plan_from_dict
    from piper.io.provenance import plan_document

    problem = problem_from_dict(two_layer_workload())
    plan = plan_from_dict(TWO_STAGE_PLAN)
    path = write_json(tmp_path, plan_document(plan, problem), "plan.json")
    assert load_saved_plan(path, problem, strict=True) == plan  # the cluster it was made for
    assert capsys.readouterr().err == ""
    other = problem.with_cluster(devices=16)
    assert load_saved_plan(path, other, strict=False, prog="solve", flag="--warm-start") == plan
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("solve: warning: --warm-start plan was made for k=8")
    with pytest.raises(PlanRecordMismatch, match="k=16"):
        load_saved_plan(path, other, strict=True)


def test_a_reserve_above_the_memory_names_the_flag(cli):
    r = cli("piper", "model", "llama3-8b", "--gpu", "h100", "--memory-reserve", "100GB")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--memory-reserve) of 1e+11 bytes leaves no memory: the device has 8.55" in r.stderr
