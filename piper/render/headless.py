"""matplotlib for files only: the one place that picks its non-interactive backend."""

from __future__ import annotations

from typing import Any

__all__ = ["headless_pyplot"]


def headless_pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (PNG files, no display); imported on first use,
    so that matplotlib stays optional. Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
