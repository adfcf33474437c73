"""``python -m piper info WORKLOAD.json``: describe a workload (layers, edges, degrees, TMPCs, ideals, cluster)."""

from __future__ import annotations

import json
from typing import Any

from piper.cli.common import ArgumentParser, add_cluster_args, add_strict_arg, load_workload, positive_int

__all__ = ["add_info_parser", "cmd_info"]


def add_info_parser(subparsers: Any) -> ArgumentParser:
    info = subparsers.add_parser("info", help="describe a workload: layers, edges, degrees, TMPCs, ideals, cluster")
    info.add_argument("file", help="workload JSON")
    add_cluster_args(info)
    add_strict_arg(info)
    info.add_argument("--max-ideals", type=positive_int, default=200_000, metavar="N", help="stop counting ideals past N")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    return info


def cmd_info(args) -> int:
    problem = load_workload(args.file, args)
    tmpc_ids = sorted({c.id for nd in problem.nodes for lst in nd.tmpcs.values() for c in lst})
    from piper.dp.ideals import count_ideals  # here, not at the top: it loads numba
    from piper.dp.limits import Progress

    ideals = count_ideals(problem, args.max_ideals, progress=Progress(True))
    names: dict[str, int] = {}
    for nd in problem.nodes:
        key = nd.name or "(unnamed)"
        names[key] = names.get(key, 0) + 1
    info = {
        "layers": problem.n,
        "edges": len(problem.edges),
        "degrees": list(problem.degrees),
        "tmpc_ids": tmpc_ids,
        "max_tmpcs_per_degree": max(len(lst) for nd in problem.nodes for lst in nd.tmpcs.values()),
        "ideals": ideals,
        "layer_kinds": names,
        "devices": problem.devices,
        "memory_per_device_bytes": problem.memory_per_device,
        "microbatches": problem.microbatches,
        "bandwidth_bytes_per_s": problem.bandwidth,
        "devices_per_node": problem.node_size,
        "intra_node_bandwidth_bytes_per_s": problem.bandwidth_intra,
        "allreduce_factor": problem.resync_factor,
        "active_features": list(problem.active_features()),
        "unknown_keys": list(problem.unknown_keys),
    }
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"workload      {args.file}")
    kinds = sorted(names.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{n}x {k}" for k, n in kinds[:4])
    if len(kinds) > 4:
        shown += f", {len(kinds) - 4} other names"
    print(f"layers        {problem.n} ({shown})")
    print(f"edges         {len(problem.edges)}")
    print(f"degrees t     {', '.join(map(str, problem.degrees))}")
    print(f"TMPC ids      {', '.join(tmpc_ids)} (at most {info['max_tmpcs_per_degree']} per layer and degree)")
    print(f"ideals        {ideals if ideals is not None else f'more than {args.max_ideals}'}")
    print(
        f"cluster       k={problem.devices} devices, M={problem.memory_per_device:.6g} bytes "
        f"({problem.memory_per_device / 2**30:.4g} GiB), N={problem.microbatches} microbatches, "
        f"B={problem.bandwidth:.6g} bytes/s ({problem.bandwidth / 2**30:.4g} GiB/s)"
    )
    print(
        f"cluster shape {problem.devices} devices in nodes of {problem.node_size}, network {problem.bandwidth:.6g} bytes/s, "
        f"intra-node {problem.bandwidth_intra:.6g} bytes/s, all-reduce factor {problem.resync_factor:.6g}"
    )
    features = problem.active_feature_notes()
    print(f"version 2     {'; '.join(f'{k} ({v})' for k, v in features.items()) if features else 'none (a version-1 instance)'}")
    return 0
