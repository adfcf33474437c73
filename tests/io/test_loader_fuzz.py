"""Randomly corrupted workload files: each is accepted or rejected with ProblemError, never another exception."""

import copy
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piper import Problem, ProblemError, load_problem, problem_from_dict

WORKLOADS = Path(__file__).resolve().parents[2] / "experiments" / "workloads"
BASE = json.loads((WORKLOADS / "gnmt.json").read_text())
BASE["nodes"] = BASE["nodes"][:6]
KEEP = {n["id"] for n in BASE["nodes"]}
BASE["edges"] = [e for e in BASE["edges"] if e["sourceId"] in KEEP and e["destId"] in KEEP]

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(BASE) if p]


@st.composite
def corrupted(draw):
    raw = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = raw
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
            if action == "replace":
                parent[path[-1]] = draw(JUNK)
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, list):
                parent.append(copy.deepcopy(parent[path[-1]]))
            else:
                parent[str(path[-1]) + "x"] = copy.deepcopy(parent[path[-1]])
        except (KeyError, IndexError, TypeError):
            pass
    return raw


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corrupted())
def test_corrupted_workloads_load_or_raise_problem_error(raw):
    try:
        problem = problem_from_dict(raw)
    except ProblemError as exc:
        assert str(exc)
    else:
        assert isinstance(problem, Problem) and problem.n >= 1


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_bytes_raise_problem_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "w.json"
    path.write_bytes(data)
    try:
        problem = load_problem(path)
    except ProblemError as exc:
        assert str(exc)
    else:  # (a few bytes can spell a valid workload only in theory)
        assert isinstance(problem, Problem) and problem.n >= 1
