"""The command line of ``python -m experiments.megatron``: ``experiments.validate``'s, under this name."""

from __future__ import annotations

from experiments.validate import cli as _validate

PROG = "python -m experiments.megatron"


def build_parser():
    return _validate.build_parser(PROG)


def main(argv: list[str] | None = None) -> int:
    return _validate.main(argv, prog=PROG)
