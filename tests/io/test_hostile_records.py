"""Hostile workload and plan records a fuzz pass found accepted or crashing (docs/errors.md): a
null ``kind``, a top-level ``name`` that is not a string, strings with a lone surrogate, a null
``schedule``, a result without a plan, unknown keys around the plan and in ``madeFor``, a
``madeFor`` that is null or of another ``record`` version. Each is one line naming the key
(exit 2 on the command line), or an unknown key's warning (an error with ``--strict``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from piper import load_plan, load_problem, plan_from_dict
from piper.core.errors import PlanFormatError, ProblemError
from piper.core.options import Options
from piper.core.result import Result
from piper.io.provenance import RECORD_KEY, check_plan_record, plan_document
from piper.solvers.registry import get_solver
from tests.commands import RunCommand

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json"


def raw() -> dict[str, Any]:
    return json.loads(SMALL.read_text())


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))  # ensure_ascii: a lone surrogate is written as the escape "\ud800"
    return path


def one_error_line(run: Any, *words: str) -> str:
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "error: " in lines[0] and all(w in lines[0] for w in words), lines[0]
    return lines[0]


# --------------------------------------------------------------------------- workloads


@pytest.mark.parametrize("key", ["name", "kind"])
def test_a_null_node_name_or_kind_is_refused(key: str) -> None:
    """Rule V6: ``name`` and ``kind``, if given, are strings (null is not "not given")."""
    doc = raw()
    doc["nodes"][2][key] = None
    with pytest.raises(ProblemError, match=rf"node \S+ {key}: must be a string, got None"):
        load_problem(doc)


@pytest.mark.parametrize("value", [5, None, ["bert"]])
def test_the_top_level_name_must_be_a_string(value: Any) -> None:
    doc = raw()
    doc["name"] = value
    with pytest.raises(ProblemError, match="top-level key 'name': must be a string"):
        load_problem(doc)


def test_a_lone_surrogate_in_a_node_name_is_one_line_naming_the_field(tmp_path: Path, cli: RunCommand) -> None:
    """``info`` printed the name and died of a UnicodeEncodeError."""
    doc = raw()
    doc["nodes"][2]["name"] = "x\ud800y"
    path = write(tmp_path / "w.json", doc)
    assert "\\ud800" in path.read_text()
    with pytest.raises(ProblemError, match=r"nodes\[2\]\.name: not valid Unicode text \(a lone surrogate"):
        load_problem(path)
    one_error_line(cli("piper", "info", str(path)), "nodes[2].name", "not valid Unicode text")


@pytest.mark.parametrize("where", ["kind", "tmpc id", "top name", "unknown key", "edge extra"])
def test_lone_surrogates_are_refused_wherever_they_are(tmp_path: Path, where: str) -> None:
    doc = raw()
    bad = "\udc80"
    if where == "kind":
        doc["nodes"][0]["kind"] = bad
        named = "nodes[0].kind"
    elif where == "tmpc id":
        doc["nodes"][1]["TMPCs"]["1"][0]["id"] = "v" + bad
        named = 'nodes[1].TMPCs["1"][0].id'
    elif where == "top name":
        doc["name"] = bad
        named = "name"
    elif where == "unknown key":  # its warning would print the key
        doc["nodes"][0]["fl" + bad] = 1
        named = 'key "fl\\udc80" in nodes[0]'
    else:
        doc["edges"][0]["note"] = ["ok", bad]
        named = "edges[0].note[1]"
    path = write(tmp_path / "w.json", doc)
    with pytest.raises(ProblemError) as exc:
        load_problem(path)
    message = str(exc.value)
    assert f"{path}: {named}: not valid Unicode text" in message and "\n" not in message
    message.encode("utf-8")  # the message itself prints


def test_the_api_refuses_a_lone_surrogate_in_a_dict_too() -> None:
    for key in ("name", "kind"):
        doc = raw()
        doc["nodes"][3][key] = "a\ud800"
        with pytest.raises(ProblemError, match=rf"node \S+ {key}: not valid Unicode text"):
            load_problem(doc)
    doc = raw()
    doc["nodes"][3]["TMPCs"]["1"][0]["id"] = "a\udfff"
    with pytest.raises(ProblemError, match=r"TMPCs\[0\] id: not valid Unicode text"):
        load_problem(doc)


def test_a_surrogate_pair_is_text_and_accepted(tmp_path: Path) -> None:
    doc = raw()
    doc["nodes"][2]["name"] = "layer \U0001f600 \u00e9"  # written as "\ud83d\ude00": a pair
    doc["name"] = "r\u00e9sum\u00e9"
    path = write(tmp_path / "w.json", doc)
    assert "\\ud83d\\ude00" in path.read_text()
    problem = load_problem(path, strict=True)
    assert problem.nodes[2].name == "layer \U0001f600 \u00e9" and problem.extra["name"] == "résumé"
    # an escaped backslash before "ud800" is the text "\ud800", not a surrogate
    doc["nodes"][2]["name"] = "\\ud800"
    assert load_problem(write(path, doc)).nodes[2].name == "\\ud800"


# --------------------------------------------------------------------------- plans


@pytest.fixture(scope="module")
def saved() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The small workload, its DP plan document (with madeFor) and its solve result's JSON."""
    problem = load_problem(SMALL)
    result = get_solver("dp")(problem, Options(progress=False))
    assert result.plan is not None
    return problem, plan_document(result.plan, problem), json.loads(json.dumps(result.to_dict()))


def test_result_keys_are_what_a_result_writes(saved) -> None:
    from piper.io.provenance import RESULT_KEYS

    _, _, result = saved
    assert set(RESULT_KEYS) == set(result) | {RECORD_KEY}
    assert set(Result.from_dict(result).to_dict()) == set(result)


def test_a_null_schedule_is_1f1b_as_documented(saved) -> None:
    """piper/core/plan.py reads an absent or null schedule as 1F1B (its documented meaning), so the
    loader does the same rather than refusing what the core accepts."""
    _, doc, _ = saved
    assert load_plan({**doc, "schedule": None}) == load_plan({**doc, "schedule": {"kind": "1f1b"}}) == load_plan(doc)


def test_a_result_without_a_plan_says_so(saved, tmp_path: Path, cli: RunCommand) -> None:
    _, _, result = saved
    for form in ({"plan": None}, {**result, "plan": None, "status": "unknown", "message": "time limit\n(3 s)"}):
        with pytest.raises(PlanFormatError) as exc:
            load_plan(form)
        assert "'plan' is null" in str(exc.value) and "has no plan" in str(exc.value)
        assert "'stages' must be a list" not in str(exc.value) and "\n" not in str(exc.value)
    line = one_error_line(cli("piper", "evaluate", str(SMALL),
                              str(write(tmp_path / "r.json", {**result, "plan": None, "status": "unknown"}))),
                          "'plan' is null")
    assert "status unknown" in line
    with pytest.raises(PlanFormatError, match="'plan' must be a plan object"):
        load_plan({"plan": "p.json"})
    assert load_plan(result) == load_plan(result["plan"])  # a whole result still reads
    with pytest.raises(PlanFormatError, match="'plan' is null: the result has no plan"):
        plan_from_dict({"plan": None})  # the core's reader says it too


def test_an_unknown_key_next_to_the_plan_is_named(saved, tmp_path: Path, cli: RunCommand) -> None:
    problem, doc, result = saved
    bare = {k: v for k, v in doc.items() if k != RECORD_KEY}
    for form in ({"plan": bare, "foo": 1}, {**result, "foo": 1}):
        (line,) = check_plan_record(form, problem, strict=False)
        assert "unknown key 'foo' next to the plan" in line and "status" in line
        with pytest.raises(PlanFormatError, match="unknown key 'foo'.*strict"):
            check_plan_record(form, problem, strict=True)
        with pytest.raises(PlanFormatError, match="unknown key 'foo'"):
            load_plan(form, strict=True)
        assert load_plan(form) == load_plan(bare)
    path = write(tmp_path / "p.json", {"plan": bare, "foo": 1})
    run = cli("piper", "evaluate", str(SMALL), str(path))
    assert run.returncode == 0 and "warning: unknown key 'foo' next to the plan" in run.stderr
    one_error_line(cli("piper", "evaluate", str(SMALL), str(path), "--strict"), "unknown key 'foo'")
    assert check_plan_record(result, problem, strict=True) == []  # a result's own keys are known


@pytest.mark.parametrize("where", ["madeFor", "madeFor.cluster"])
def test_unknown_keys_in_the_record_warn_and_strict_refuses(saved, tmp_path: Path, cli: RunCommand,
                                                            where: str) -> None:
    problem, doc, _ = saved
    bad = copy.deepcopy(doc)
    (bad[RECORD_KEY] if where == "madeFor" else bad[RECORD_KEY]["cluster"])["gpus"] = 8
    (line,) = check_plan_record(bad, problem, strict=False)
    assert line.startswith(f"unknown key 'gpus' in {where} (known: ")
    with pytest.raises(PlanFormatError, match=f"unknown key 'gpus' in {where}"):
        check_plan_record(bad, problem, strict=True)
    path = write(tmp_path / "p.json", bad)
    for command in ("evaluate", "show"):
        extra = ["--out", str(tmp_path / "p.png")] if command == "show" else []
        argv = [str(path), str(SMALL)] if command == "show" else [str(SMALL), str(path)]
        run = cli("piper", command, *argv, *extra)
        assert run.returncode == 0 and f"warning: unknown key 'gpus' in {where}" in run.stderr, run.stderr
        one_error_line(cli("piper", command, *argv, *extra, "--strict"), f"unknown key 'gpus' in {where}")


@pytest.mark.parametrize("record, named", [
    (2, "madeFor.record is 2"),
    ("1", 'madeFor.record is "1"'),
    (True, "madeFor.record is true"),
    (None, "madeFor.record is null"),
    ("missing", "madeFor.record is missing"),
])
def test_a_record_of_another_version_is_one_line(saved, tmp_path: Path, cli: RunCommand, record: Any,
                                                 named: str) -> None:
    problem, doc, _ = saved
    bad = copy.deepcopy(doc)
    if record == "missing":
        del bad[RECORD_KEY]["record"]
    else:
        bad[RECORD_KEY]["record"] = record
    for form in (bad, {"plan": bad}):
        with pytest.raises(PlanFormatError, match=named):
            load_plan(form)
    (line,) = check_plan_record(bad, problem, strict=False)
    assert named in line
    one_error_line(cli("piper", "evaluate", str(SMALL), str(write(tmp_path / "p.json", bad)), "--strict"), named)
    one_error_line(cli("piper", "evaluate", str(SMALL), str(tmp_path / "p.json")), named)


def test_a_null_record_is_one_line(saved, tmp_path: Path, cli: RunCommand) -> None:
    problem, doc, _ = saved
    bad = {**doc, RECORD_KEY: None}
    with pytest.raises(PlanFormatError, match="madeFor is null"):
        load_plan(bad)
    with pytest.raises(PlanFormatError, match="madeFor must be an object, got list"):
        load_plan({**doc, RECORD_KEY: [1]})
    assert check_plan_record(bad, problem, strict=False) == ["the plan's 'madeFor' is null: it cannot be checked"]
    one_error_line(cli("piper", "evaluate", str(SMALL), str(write(tmp_path / "p.json", bad))), "madeFor is null")


def test_a_lone_surrogate_in_a_plan_is_one_line(saved, tmp_path: Path, cli: RunCommand) -> None:
    _, doc, _ = saved
    bad = copy.deepcopy(doc)
    node = next(iter(bad["stages"][0]["TMPCids"]))
    bad["stages"][0]["TMPCids"][node] = "vanilla\ud800"
    with pytest.raises(PlanFormatError, match=r"stages\[0\]\.TMPCids\[\"\d+\"\]: not valid Unicode text"):
        load_plan(bad)
    one_error_line(cli("piper", "evaluate", str(SMALL), str(write(tmp_path / "p.json", bad))),
                   f'stages[0].TMPCids["{node}"]', "not valid Unicode text")
