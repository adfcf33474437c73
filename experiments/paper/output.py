"""What every paper experiment writes with: CSVs with full float precision, the variants'
labels and colours in the plots, and numbers in the progress lines."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LABELS = {
    "piper": "Piper",
    "noDP": "no DP",
    "noTP": "no TP",
    "noAR": "no AR",
    "equi_noTP": "equi, no TP",
    "equi": "equi",
    "equi_nonTransformer": "equi (topological split)",
}
COLORS = {  # the driver's colours
    "piper": "#2b7bba",
    "noDP": "#DB7093",
    "noTP": "#FFD700",
    "noAR": "#008000",
    "equi_noTP": "#191970",
    "equi": "#FF4500",
    "equi_nonTransformer": "#FF4500",
}


def _cell(x: Any) -> Any:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else ""
    return x


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Write rows with full float precision (``repr``); None / inf become empty cells."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in columns])


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def short_number(x: float | None) -> str:
    """A number in a progress line: 6 significant digits, ``-`` for None."""
    return "-" if x is None else f"{x:.6g}"
