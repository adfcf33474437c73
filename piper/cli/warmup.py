"""``python -m piper warmup``: compile every kernel of the DP ahead, into numba's on-disk cache
(:mod:`piper.dp.warmup`); an install step for CI or a cluster image. Later runs only load them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from piper.cli.common import ArgumentParser

__all__ = ["add_warmup_parser", "cmd_warmup"]


def add_warmup_parser(subparsers: Any) -> ArgumentParser:
    p = subparsers.add_parser("warmup", help="compile the DP's kernels ahead (first run after an install: about a minute)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def cmd_warmup(args: argparse.Namespace) -> int:
    from piper.dp.warmup import (  # imports numba
        compile_kernels,
        kernels_ready,
        marker_path,
    )

    was_ready = kernels_ready()
    seconds = compile_kernels()
    if args.json:
        print(json.dumps({"was_cached": was_ready, "seconds": seconds, "marker": str(marker_path())}))
    else:
        state = "were already in numba's cache" if was_ready else "compiled into numba's cache"
        print(f"the DP's kernels {state} ({seconds:.1f} s); later runs load them from there")
    return 0
