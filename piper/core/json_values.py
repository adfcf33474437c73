"""Values as plain JSON data (:func:`jsonable`): what every ``--json`` output and report writes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["jsonable"]


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
