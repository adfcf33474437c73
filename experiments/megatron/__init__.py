"""``python -m experiments.megatron``: an alias of ``python -m experiments.validate`` (issue 30),
which absorbed it: the same flags and outputs (see :mod:`experiments.validate`). The planner
section of the old experiment (Piper's DP on each published workload) is not part of it."""
