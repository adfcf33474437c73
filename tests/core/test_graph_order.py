"""The layer graph's topological order (ties by file order) and the cycle error, which names the cycle."""

import pytest

from piper import ProblemError, problem_from_dict
from tests.helpers import tmpc, workload


def _graph(node_ids, edges):
    """A workload over ``node_ids`` (file order) with one TMPC per node and the given edges."""
    return workload({v: {1: [tmpc(p=1.0)]} for v in node_ids}, [(u, v, 1.0) for u, v in edges])


def test_ties_follow_file_order_not_id_order():
    # 7 and 3 are both sources; 7 comes first in the file, so it comes first in the order
    p = problem_from_dict(_graph([7, 3, 5, 1], [(3, 5), (7, 1)]))
    assert p.topological_order == (7, 3, 5, 1)


def test_a_successor_waits_for_all_its_predecessors():
    # file order 2, 0, 1 with 0 -> 2 and 1 -> 2: 2 must come after both
    p = problem_from_dict(_graph([2, 0, 1], [(0, 2), (1, 2)]))
    assert p.topological_order == (0, 1, 2)


def test_cycle_error_names_the_cycle():
    raw = _graph([0, 1, 2, 3], [(0, 1), (1, 2), (2, 3), (3, 1)])
    with pytest.raises(ProblemError) as err:
        problem_from_dict(raw)
    msg = str(err.value)
    assert "cycle" in msg
    # the cycle is 1 -> 2 -> 3 -> 1 (node 0 is not on it); networkx may start it anywhere on the loop
    assert any(f"{a} -> {b} -> {c} -> {a}" in msg for a, b, c in [(1, 2, 3), (2, 3, 1), (3, 1, 2)]), msg
    assert "0 ->" not in msg
