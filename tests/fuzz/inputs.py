"""Hypothesis strategies for hostile inputs (workloads, plans, Hugging Face configs, hardware
files, flag values) and the contract every entry point must keep with them (docs/errors.md):
a result, or one line naming the problem (exit status 2 on the command line), never another
exception."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from piper.cli.common import run_main
from tests.helpers import tmpc, workload

#: seconds a command may run past its --time-limit (imports are done: the calls are in process;
#: the machine may be loaded, and an exact model's build is not under the limit yet)
MARGIN_S = 60.0


def base_workload(n: int = 4) -> dict[str, Any]:
    """A chain of ``n`` layers, two TMPCs at t = 1 and 2, k = 4, N = 4."""
    per = {1: [tmpc("vanilla", 1.0, 1e6, 1e6, 1e6), tmpc("activation recomp", 1.3, 1e6, 1e5, 1e6)],
           2: [tmpc("vanilla", 0.6, 5e5, 5e5, 5e5)]}
    return workload({v: copy.deepcopy(per) for v in range(n)}, [(v, v + 1, 1e5) for v in range(n - 1)],
                    k=4, M=1e9, N=4, B=1e9)


def base_plan() -> dict[str, Any]:
    return {"stages": [{"nodes": [0, 1], "dataParallelDegree": 1, "tensorParallelDegree": 2,
                        "TMPCids": {"0": "vanilla", "1": "vanilla"}},
                       {"nodes": [2, 3], "dataParallelDegree": 2, "tensorParallelDegree": 1,
                        "TMPCids": {"2": "vanilla", "3": "activation recomp"}}]}


def base_hf() -> dict[str, Any]:
    return {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
            "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 256,
            "hidden_act": "silu", "model_type": "llama", "tie_word_embeddings": False}


def base_hardware() -> dict[str, Any]:
    return {"gpu": "a100-80gb", "memory_bytes": 8e10, "network_bandwidth": 2.5e10}


#: numbers at and past every documented limit (docs/errors.md)
EXTREME_NUMBERS = st.one_of(
    st.sampled_from([0, -1, 1, 2, 2**31 - 1, 2**31, 2**53, 2**53 + 1, 2**62, 2**63, 2**64, 10**20, 10**39, 10**40,
                     -(2**63), 0.5, 1e-30, 1e-31, 1e-300, 5e-324, 1e30, 1.0000001e30, 1e31, 1e300, 1e308,
                     1.7976931348623157e308, -0.0, 4.0, 1.5]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
#: values of the wrong type
JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.text(max_size=6), EXTREME_NUMBERS),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=6,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any], extra_keys: Sequence[str] = ()) -> Any:
    """``base`` with 1-3 random edits: a value replaced by an extreme number or junk, a key
    deleted, a key added (a misspelling or one of ``extra_keys``), an item duplicated."""
    raw = copy.deepcopy(base)
    paths = [p for p in _paths(raw) if p]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent: Any = raw
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["number", "junk", "delete", "add", "duplicate"]))
            if action == "number":
                parent[path[-1]] = draw(EXTREME_NUMBERS)
            elif action == "junk":
                parent[path[-1]] = draw(JUNK)
            elif action == "delete":
                del parent[path[-1]]
            elif action == "add" and isinstance(parent, dict):
                key = draw(st.sampled_from([*extra_keys, str(path[-1]) + "x", "x"]))
                parent[key] = draw(st.one_of(EXTREME_NUMBERS, JUNK))
            elif isinstance(parent, list):
                parent.append(copy.deepcopy(parent[path[-1]]))
        except (KeyError, IndexError, TypeError):
            pass
    return raw


_NUMBER = re.compile(r'(?:[:\[]|, )\s*(-?[0-9][0-9.eE+-]*)(?=\s*[,\]}])')


@st.composite
def corrupted_text(draw: st.DrawFn, obj: Any) -> bytes:
    """``obj`` as JSON text, then broken at the text level: a duplicate key, a huge integer
    literal, NaN / Infinity / 1e999, deep nesting, a truncation, a byte that is not UTF-8, a
    BOM, or nothing."""
    text = json.dumps(obj)
    kind = draw(st.sampled_from(["none", "duplicate", "bigint", "nan", "overflow", "underflow", "deep", "truncate",
                                 "bytes", "bom", "nul", "empty"]))
    if kind == "duplicate" and text.startswith("{") and len(text) > 2:
        key = draw(st.sampled_from(list(obj))) if isinstance(obj, dict) and obj else "a"
        text = "{" + json.dumps(key) + ": 1, " + text[1:]
    elif kind in ("bigint", "nan", "overflow", "underflow"):
        lit = {"bigint": "9" * draw(st.integers(30, 5000)), "nan": draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])),
               "overflow": "1e999", "underflow": "1e-999"}[kind]
        numbers = list(_NUMBER.finditer(text))  # a number that is a value, not inside a string
        if numbers:
            m = draw(st.sampled_from(numbers))
            text = text[: m.start(1)] + lit + text[m.end(1):]
    elif kind == "deep":
        depth = draw(st.sampled_from([31, 33, 1000, 100_000]))
        text = text[:-1] + ', "z": ' + "[" * depth + "]" * depth + "}" if text.endswith("}") else "[" * depth + "]" * depth
    elif kind == "truncate":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif kind == "empty":
        text = ""
    data = text.encode("utf-8")
    if kind == "bytes":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80"])) + data[at:]
    elif kind == "bom":
        data = b"\xef\xbb\xbf" + data
    elif kind == "nul":
        data = data + b"\x00"
    return data


#: hostile values for a numeric flag (counts, sizes, seconds, factors)
FLAG_VALUES = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "Infinity", "1e400", "1e-400", "-1", "0", "-0", "0.0", "1", "2", "10^20",
                     "2^62", "4611686018427387904", "100000000000000000000", "9" * 50, "9" * 5000, "", " ", "1.5",
                     "-1GB", "1e30GB", "8GiB", "1e31", "1e-31", "abc", "1_000", "0x10", "1e3", "+3", "１"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    st.text(max_size=8),
)


def call(main: Callable[[Sequence[str] | None], int], argv: Sequence[str], prog: str) -> tuple[int, str, str, float]:
    """``run_main(main, argv)`` in this process: exit status, stdout, stderr, seconds."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run_main(main, list(argv), prog=prog)
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - start


def assert_contract(rc: int, out: str, err: str, prog: str, *, ok: Sequence[int] = (0,), json_out: bool = False) -> None:
    """Exit 2 with exactly one error line (the last line of stderr), or an ``ok`` status
    (with ``json_out``: stdout is one JSON object); never a traceback."""
    assert "Traceback" not in err, err
    if rc == 2:
        lines = err.rstrip("\n").split("\n")
        errors = [line for line in lines if line.startswith(f"{prog}: error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0], err
    else:
        assert rc in ok, (rc, err[-2000:])
        if json_out:
            doc = json.loads(out)
            assert isinstance(doc, dict)
