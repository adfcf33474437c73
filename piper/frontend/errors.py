"""Errors of the model front end.

They subclass :class:`piper.cli.UsageError` (itself a ``ValueError``), so the
command line's ``run_main`` reports them in one line on stderr with exit
status 2, like every other user error.
"""

from __future__ import annotations

from ..cli import UsageError

__all__ = ["FrontendError", "ModelConfigError", "HardwareError"]


class FrontendError(UsageError):
    """A bad input to the model front end (model config, hardware, batch sizes)."""


class ModelConfigError(FrontendError):
    """An invalid transformer description; the message names the field at fault."""


class HardwareError(FrontendError):
    """An unknown accelerator / node type or an invalid hardware number."""
