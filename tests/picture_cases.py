"""A chain workload whose bottleneck stage is known, a plan of one layer per stage, and the
size of a PNG file (for the picture tests)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from piper import Plan, Stage

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chain_workload(layers: int, *, k: int, G: int | None, N: int, hot: int, M: float = 80e9) -> dict[str, Any]:
    """A chain of ``layers`` layers, degrees 1..8; layer ``hot`` computes 5x longer than any
    other, and the network is fast, so the stage holding it is the bottleneck."""
    nodes, edges = [], []
    for v in range(layers):
        tm = {}
        for t in (1, 2, 4, 8):
            p = (5.0 if v == hot else 1.0 + 0.1 * (v % 3)) / t
            tm[str(t)] = [{"id": "vanilla", "timePerSample": p, "parameterSize": 1e6 / t,
                           "memoryUsageA": 1e8 * (1 + v % 3), "memoryUsageB": 1e9 / t,
                           "syncTimeFw": {str(v - 1): 0.0} if v else {},
                           "syncTimeBw": {str(v + 1): 0.0} if v < layers - 1 else {}}]
        nodes.append({"id": v, "TMPCs": tm})
        if v:
            edges.append({"sourceId": v - 1, "destId": v, "communicationCost": 1e3})
    out = {"maxDevices": k, "maxMemoryPerDevice": M, "mbsInBatch": N, "bandwidth": 1e15, "nodes": nodes, "edges": edges}
    if G is not None:
        out["devicesPerNode"] = G
    return out


def one_layer_per_stage(layers: int, d: int, t: int) -> Plan:
    return Plan(tuple(Stage((v,), d, t, {v: "vanilla"}) for v in range(layers)))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])
