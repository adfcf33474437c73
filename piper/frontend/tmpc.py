"""TMPC ids of generated workloads and their meaning.

An id is the activation-recomputation kind, followed by ``+sp`` when
Megatron's sequence parallelism ([K22] Korthikanti et al. 2022, Section 4.2.2)
is on:

=================  ==========================================================
id                 meaning
=================  ==========================================================
``none``           keep every activation
``selective``      recompute the core attention only ([K22] Section 5)
``full``           keep each layer's input, recompute the layer in backward
``none+sp``        ``none`` with sequence parallelism (t > 1 only)
``selective+sp``   ``selective`` with sequence parallelism (t > 1 only)
``full+sp``        ``full`` with sequence parallelism (t > 1 only)
=================  ==========================================================

Transformer layers get all of them; the embedding, final norm and output
head get ``none`` (and ``none+sp`` when t > 1), since recomputation is a
per-transformer-layer choice in Megatron-LM. Piper picks one TMPC per layer,
so a plan may mix sequence parallelism on and off inside a stage; Megatron
has one switch for the whole model, which the export code must reconcile.
"""

from __future__ import annotations

from piper.core.errors import FrontendError
from piper.frontend.costs import RECOMPUTE_KINDS

__all__ = ["SP_SUFFIX", "parse_tmpc_id", "tmpc_id", "tmpc_ids"]

SP_SUFFIX = "+sp"


def tmpc_id(recompute: str, sequence_parallel: bool) -> str:
    """The id for a recomputation kind and the sequence-parallel switch."""
    if recompute not in RECOMPUTE_KINDS:
        raise FrontendError(f"recompute must be one of {', '.join(RECOMPUTE_KINDS)}, got {recompute!r}")
    return recompute + (SP_SUFFIX if sequence_parallel else "")


def parse_tmpc_id(tmpc: str) -> tuple[str, bool]:
    """``(recompute, sequence_parallel)`` of a TMPC id, e.g. ``"full+sp"`` -> ``("full", True)``."""
    base, sp = (tmpc[: -len(SP_SUFFIX)], True) if tmpc.endswith(SP_SUFFIX) else (tmpc, False)
    if base not in RECOMPUTE_KINDS:
        known = ", ".join(tmpc_ids(2))
        raise FrontendError(f"not a front-end TMPC id: {tmpc!r} (known: {known})")
    return base, sp


def tmpc_ids(t: int, recompute: tuple[str, ...] = RECOMPUTE_KINDS) -> list[str]:
    """The ids offered at tensor-parallel degree t: without sequence parallelism, then with it (t > 1)."""
    out = [tmpc_id(r, False) for r in recompute]
    if t > 1:
        out += [tmpc_id(r, True) for r in recompute]
    return out
