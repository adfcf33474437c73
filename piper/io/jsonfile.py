"""JSON files: reading one with user-facing errors (one exception type per caller), and
values made JSON-safe (:func:`jsonable`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read_json(path: str | Path, error: type[Exception], what: str) -> Any:
    """Parse the JSON file at ``path``; any failure raises ``error`` with a one-line
    message naming the file (``what`` says what kind of file it should be)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise error(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: a non-finite float becomes None (JSON has no infinity),
    mappings become dicts with string keys, lists and tuples lists, and anything else that is
    not None, a bool, int or str its ``str``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)
