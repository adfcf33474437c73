"""Reading a plan from a JSON file (or an already-parsed dict): :func:`load_plan`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper.core.errors import PlanFormatError
from piper.core.plan import Plan, plan_from_dict
from piper.io.jsonfile import read_json

__all__ = ["load_plan"]


def load_plan(source: str | Path | Mapping[str, Any]) -> Plan:
    """A plan from a JSON file path or a parsed dict; a :class:`PlanFormatError` names what is wrong."""
    if isinstance(source, Mapping):
        return plan_from_dict(source)
    return plan_from_dict(read_json(source, PlanFormatError, "plan"))
