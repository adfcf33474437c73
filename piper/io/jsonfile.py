"""The one way in for every JSON file: workloads, plans, model configs, hardware files.

:func:`read_json` reads a file of one kind (a key of :data:`piper.core.limits.MAX_FILE_BYTES`)
and :func:`parse_json` parses text already in memory. Either refuses, with one line that names
the file and the problem (an exception of the caller's type):

* a file larger than its kind's limit (read no further than that: ``/dev/zero`` is refused too);
* a named pipe (FIFO) that no process writes into within :data:`~piper.core.limits.FIFO_WAIT_S`
  (it is not waited for forever; one with a writer, a shell's ``<(...)``, is read as a file);
* bytes that are not UTF-8 text;
* JSON that does not parse (with the line and column), including NaN / Infinity, which are not JSON;
* nesting deeper than :data:`~piper.core.limits.MAX_JSON_DEPTH` arrays and objects;
* a key given twice in one object (named, with where it is: ``nodes[3].TMPCs["1"][0]``);
* an integer literal of more than :data:`~piper.core.limits.MAX_INT_DIGITS` digits, and a number
  that overflows a float (``1e999``) or underflows to zero (``1e-999``);
* a string (a value or a key) holding a lone surrogate (the escape ``"\\ud800"`` without its
  pair): not Unicode text, it cannot be printed or drawn (named: ``nodes[2].name``).

What the values mean (ranges per field) is each loader's to check.
"""

from __future__ import annotations

import json
import os
import re
import select
import stat
from pathlib import Path
from typing import Any

import numpy as np

from piper.core.limits import FIFO_WAIT_S, MAX_FILE_BYTES, MAX_INT_DIGITS, MAX_JSON_DEPTH

__all__ = ["read_json", "parse_json", "describe_path", "lone_surrogate", "find_lone_surrogate"]

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
#: a ``\\uD800``..``\\uDFFF`` escape in JSON text (maybe a lone surrogate once parsed)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Refused(Exception):
    """Raised by a parse hook; the message is completed with the place in the text."""

    def __init__(self, message: str, literal: str | None = None) -> None:
        super().__init__(message)
        self.literal = literal


def _size_words(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"


def read_json(path: str | Path, error: type[Exception], what: str) -> Any:
    """Parse the JSON file at ``path`` of kind ``what`` ("workload", "plan", "model config",
    "hardware"); any failure raises ``error`` with a one-line message naming the file."""
    if what not in MAX_FILE_BYTES:
        raise ValueError(f"read_json: unknown file kind {what!r}; known: {', '.join(MAX_FILE_BYTES)}")
    path = Path(path)
    limit = MAX_FILE_BYTES[what]
    if str(path) == "":
        raise error(f"an empty path was given for the {what} file")
    try:
        data, fifo = _read_at_most(path, limit + 1)
    except IsADirectoryError:
        raise error(f"cannot read {what} file {str(path)!r}: it is a directory") from None
    except OSError as exc:
        raise error(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}") from None
    if fifo == "waited":
        raise error(f"cannot read {what} file {str(path)!r}: a named pipe (FIFO) that gave no data "
                    f"within {FIFO_WAIT_S:g} s (no process writes to it?)")
    if fifo == "read" and not data:
        raise error(f"cannot read {what} file {str(path)!r}: a named pipe (FIFO) whose writer closed it "
                    "without writing anything")
    if len(data) > limit:
        raise error(f"{path}: larger than {_size_words(limit)}, the most a {what} file may hold (docs/errors.md)")
    return parse_json(data, error, str(path))


def _read_at_most(path: Path, size: int) -> tuple[bytes, str | None]:
    """The first ``size`` bytes of the file at ``path``, and for a named pipe (FIFO) "read", or
    "waited" when no process started writing into it within :data:`~piper.core.limits.FIFO_WAIT_S`
    (then no bytes); None for any other file. The file is opened without blocking, so a FIFO is not
    waited for at its opening; one with a writer (a shell's ``<(...)``, ``producer > fifo &``) is
    read to its end as a file is."""
    if not hasattr(os, "O_NONBLOCK") or not hasattr(select, "poll"):  # no named pipes to wait for (Windows)
        with open(path, "rb") as fh:
            return fh.read(size), None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        fifo = None
        if stat.S_ISFIFO(mode):
            fifo = "read"
            waiting = select.poll()
            waiting.register(fd, select.POLLIN)
            if not waiting.poll(FIFO_WAIT_S * 1000):
                return b"", "waited"
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(size), fifo
    finally:
        os.close(fd)


def parse_json(data: bytes | str, error: type[Exception], name: str) -> Any:
    """Parse JSON ``data`` under the reader's rules (module docstring); ``name`` (a file name)
    starts every message."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}); a JSON file is UTF-8 text") from None
    else:
        text = data
    if "\x00" in text:
        raise error(f"{name}: not a text file (it holds NUL bytes)")
    depth = _depth(text)
    if depth > MAX_JSON_DEPTH:
        raise error(f"{name}: JSON nested {depth} levels deep, more than the {MAX_JSON_DEPTH} any file of "
                    "the project's formats may have")
    duplicates: list[tuple[str, dict[str, Any]]] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs) and not duplicates:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    duplicates.append((key, out))
                    break
                seen.add(key)
        return out

    try:
        value = json.loads(text, object_pairs_hook=pairs_hook, parse_int=_parse_int, parse_float=_parse_float,
                           parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{name}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except _Refused as exc:
        where = ""
        if exc.literal is not None:
            at = text.find(exc.literal)
            if at >= 0:
                line = text.count("\n", 0, at) + 1
                where = f" at line {line} column {at - text.rfind(chr(10), 0, at)}"
        raise error(f"{name}: {exc}{where}") from None
    except RecursionError:  # not reached below MAX_JSON_DEPTH; kept as a guard
        raise error(f"{name}: JSON nested too deeply") from None
    if duplicates:
        key, obj = duplicates[0]
        raise error(f"{name}: duplicate key {key!r} in {describe_path(_find(value, obj))} "
                    "(a key may appear once in an object)")
    # json.loads joins an escaped surrogate pair into one character; one left alone is not text
    # (printing it raises UnicodeEncodeError). Bytes decoded as UTF-8 hold none unescaped.
    if (("\\u" in text and _SURROGATE_ESCAPE.search(text))
            or (not isinstance(data, bytes) and not text.isascii() and _SURROGATE.search(text))):
        where = find_lone_surrogate(value)
        if where is not None:
            raise error(f"{name}: {where}")
    return value


def lone_surrogate(text: str) -> str | None:
    """None for Unicode text; for a string holding a lone surrogate (a code point in
    U+D800..U+DFFF, which UTF-8 cannot encode), the words that say so."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return f"not valid Unicode text (a lone surrogate, \\u{ord(found.group()):04x})"


def find_lone_surrogate(value: Any) -> str | None:
    """The first string (key or value) in the parsed JSON ``value`` holding a lone surrogate,
    with where it is and what is wrong: ``'nodes[2].name: not valid Unicode text (...)'``; None
    when there is none."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            words = lone_surrogate(node)
            if words is not None:
                return f"{describe_path(path) if path else 'the top-level value'}: {words}"
        elif isinstance(node, dict):
            for key, item in node.items():
                words = lone_surrogate(key) if isinstance(key, str) else None
                if words is not None:
                    return f"key {json.dumps(key)} in {describe_path(path)}: {words}"
            stack.extend((item, path + (key,)) for key, item in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((item, path + (i,)) for i, item in reversed(list(enumerate(node))))
    return None


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (strings skipped)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    brackets = _NOT_BRACKET.sub("", _STRING.sub('""', text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(literal.lstrip('-'))} digits (at most {MAX_INT_DIGITS}: no field holds "
                       "a number that large)", literal)
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {literal[:40]} overflows a float (no field holds a number that large)", literal)
    if value == 0.0 and re.search(r"[1-9]", literal.split("e")[0].split("E")[0]):
        raise _Refused(f"the number {literal[:40]} underflows to zero (write 0 for zero)", literal)
    return value


def _parse_constant(literal: str) -> Any:
    raise _Refused(f"{literal} is not a JSON number (JSON has no NaN or infinity)", literal)


def _find(root: Any, target: Any) -> tuple[Any, ...] | None:
    """The path (keys and indexes) from ``root`` to the object ``target`` (by identity)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if isinstance(node, dict):
            stack.extend((v, path + (k,)) for k, v in node.items() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(node) if isinstance(v, (dict, list)))
    return None


def describe_path(path: tuple[Any, ...] | None) -> str:
    """``("nodes", 3, "TMPCs", "1", 0)`` -> ``'nodes[3].TMPCs["1"][0]'``; ``()`` -> ``'the top-level object'``."""
    if not path:
        return "the top-level object"
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out
