"""The loader's fast path (piper.io.workload: _field, _count_field, _plain_id) returns what the full
checks return (checked_number, _node_id), and leaves every other value to them, so a workload
loads to the same Problem and a bad value raises the same error."""

from __future__ import annotations

import math

import pytest

from piper.core.errors import ProblemError
from piper.core.problem import checked_number
from piper.io.workload import _count_field, _field, _node_id, _plain_id

NUMBERS = [0.0, -0.0, 1.5, 1e30, 1e30 * (1 + 1e-15), 2e30, -1e-300, math.inf, -math.inf, math.nan, 5e-324, 0, 3,
           -2, 10**40, True, False, None, "1.0", [1.0]]
COUNTS = [1, 2, 64, 0, -1, 10**12, 1.0, 2.5, True, None, "2"]
KEYS = ["0", "7", "007", "123456789012345", "1234567890123456", "", " 3", "+3", "-3", "3.0", "٣", "²", 5, 2.0, True]


def _outcome(fn, *args, **kwargs):
    try:
        value = fn(*args, **kwargs)
    except ProblemError as exc:
        return "error", str(exc)
    return "value", type(value), repr(value)


@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_field_is_checked_number(value):
    raw = {"timePerSample": value}
    assert _outcome(_field, raw, "timePerSample", "here") == _outcome(checked_number, value, "here timePerSample")


def test_field_default_applies_to_an_absent_key_only():
    assert _field({}, "stepTime", "here", 0.0) == 0.0
    with pytest.raises(ProblemError, match="here stepTime"):
        _field({"stepTime": None}, "stepTime", "here", 0.0)


@pytest.mark.parametrize("value", COUNTS, ids=repr)
def test_count_field_is_checked_count(value):
    raw = {"expertParallel": value}
    assert _outcome(_count_field, raw, "expertParallel", "here") == _outcome(
        lambda v, w: int(checked_number(v, w, integer=True)), value, "here expertParallel")


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_plain_id_agrees_with_node_id(key):
    got = _plain_id(key)
    if got is not None:
        assert _outcome(_node_id, key, "here") == ("value", int, repr(got))
