"""Every exception class of the project, in one module.

User errors (the user's to fix: a bad workload, plan, flag, model description or hardware
file) are :data:`USER_ERRORS`; the command line reports each in one line on stderr with exit
status 2 (:func:`piper.cli.common.run_main`). :class:`SolverError` is a solver that cannot
handle the instance (too large, a missing backend, an option it does not support): a user
error too. :class:`PoolClosed` is the only internal one.
"""

from __future__ import annotations

__all__ = [
    "ProblemError", "PlanFormatError", "PlanRecordMismatch", "PlanError", "SolverError", "UsageError",
    "FrontendError", "ModelConfigError", "HardwareError", "ExportError", "PoolClosed", "USER_ERRORS",
]


class ProblemError(ValueError):
    """An invalid workload: the message names the node / edge / key at fault."""


class PlanFormatError(ValueError):
    """A plan file or object that is not in the plan JSON shape."""


class PlanRecordMismatch(PlanFormatError):
    """A plan whose ``madeFor`` record does not match the workload or cluster given (with
    ``strict=True``). A :class:`~piper.core.plan.PlanFormatError`, so every command reports it
    as a user error: one line on stderr, exit status 2."""


class PlanError(ValueError):
    """A structurally invalid plan; the message names the broken rule and the stage."""


class SolverError(RuntimeError):
    """A solver cannot handle this instance (too large, missing backend, ...);
    the message says why and what to change."""


class UsageError(ValueError):
    """A bad command line (unknown flag, bad value, ...)."""


class FrontendError(UsageError):
    """A bad input to the model front end (model config, hardware, batch sizes)."""


class ModelConfigError(FrontendError):
    """An invalid transformer description; the message names the field at fault."""


class HardwareError(FrontendError):
    """An unknown accelerator / node type or an invalid hardware number."""


class ExportError(ValueError):
    """A plan the target cannot express, or a workload whose layers cannot be mapped.

    The message is one line: the target, the stage (or node), the rule (E1-E7) and, when
    planning with ``--uniform`` would make the plan expressible, that suggestion."""

    def __init__(self, message: str, *, rule: str, target: str | None = None, stage: int | None = None,
                 recompute: bool = False) -> None:
        super().__init__(message)
        self.rule = rule
        self.target = target
        self.stage = stage
        #: the refusal is about recomputation only (``fit_recompute`` may find a setting)
        self.recompute = recompute


class PoolClosed(RuntimeError):
    """Raised by a closed :class:`WorkerPool` (the run was interrupted)."""


#: exceptions that are the user's to fix: reported in one line with exit status 2
USER_ERRORS: tuple[type[BaseException], ...] = (ProblemError, PlanError, PlanFormatError, SolverError, UsageError)
