"""Reading a plan from a JSON file (or an already-parsed dict): :func:`load_plan`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper.core.errors import PlanFormatError
from piper.core.plan import Plan, plan_from_dict
from piper.io.jsonfile import find_lone_surrogate, read_json
from piper.io.provenance import RECORD_KEY, record_shape_error, unknown_document_keys

__all__ = ["load_plan"]


def load_plan(source: str | Path | Mapping[str, Any] | list[Any], *, strict: bool = False) -> Plan:
    """A plan from a JSON file path or a parsed document (a dict, or a bare stage list); a
    :class:`PlanFormatError` names what is wrong.

    Besides :func:`~piper.core.plan.plan_from_dict`'s checks it refuses, in one line naming the
    key: a result (``{"plan": ...}``) without a plan, a ``madeFor`` record that is null, not an object or of another ``record``
    version, and a string that is not Unicode text. Unknown keys around the plan and in
    ``madeFor`` are errors with ``strict=True``; the commands warn about them
    (:func:`piper.io.provenance.check_plan_record`)."""
    if isinstance(source, (Mapping, list)):
        raw: Any = source
        where = find_lone_surrogate(raw)  # a file's text is checked by read_json
        if where is not None:
            raise PlanFormatError(f"the plan: {where}")
    else:
        raw = read_json(source, PlanFormatError, "plan")
    _check_document(raw)
    if strict:
        unknown = unknown_document_keys(raw)
        if unknown:
            raise PlanFormatError(f"{unknown[0]} (strict mode: unknown keys are errors)")
    return plan_from_dict(raw)


def _check_document(raw: Any) -> None:
    """The document-level checks :func:`load_plan` adds (its docstring)."""
    if not isinstance(raw, Mapping):
        return
    plan = raw
    if "plan" in raw and "stages" not in raw:  # a solver result's JSON
        plan = raw["plan"]
        if plan is None:
            status = raw.get("status")
            said = f" (status {status}" if isinstance(status, str) else ""
            message = raw.get("message")
            if said and isinstance(message, str) and message:
                said += f": {' '.join(message.split())[:200]}"
            raise PlanFormatError(f"'plan' is null: the result{said + ')' if said else ''} has no plan to read")
        if not isinstance(plan, (Mapping, list)):
            raise PlanFormatError(f"'plan' must be a plan object (or a list of stages), got {type(plan).__name__}")
    if RECORD_KEY in raw and plan is not raw:  # a record next to the plan
        _check_record(raw[RECORD_KEY])
    if isinstance(plan, Mapping):
        if RECORD_KEY in plan:
            _check_record(plan[RECORD_KEY])


def _check_record(record: Any) -> None:
    error = record_shape_error(record)
    if error is not None:
        raise PlanFormatError(error)
