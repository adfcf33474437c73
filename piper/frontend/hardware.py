"""Hardware catalog: accelerators, node types, and user-supplied numbers.

Units: FLOP/s (dense bf16 tensor-core peak, no sparsity), bytes, bytes/s.
Link bandwidths are per device and per direction (what one device can send
while it receives as much), the figure a ring collective is limited by.

Sources (vendor datasheets, by name):

* NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOP/s dense (624 with
  sparsity); 40 GB HBM2 or 80 GB HBM2e; NVLink 600 GB/s per GPU
  (bidirectional, so 300 GB/s each way).
* NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TFLOP/s with
  sparsity = 989 TFLOP/s dense; 80 GB HBM3; NVLink 900 GB/s (450 GB/s each way).
* NVIDIA H200 Tensor Core GPU datasheet (SXM): same compute as H100 (989
  TFLOP/s dense BF16); 141 GB HBM3e; NVLink 900 GB/s.
* NVIDIA DGX B200 datasheet / HGX B200 specifications: BF16 4.5 PFLOP/s
  with sparsity per GPU = 2.25 PFLOP/s dense; 1,440 GB GPU memory per 8 GPUs
  = 180 GB each; fifth-generation NVLink 1.8 TB/s (900 GB/s each way).
* NVIDIA DGX A100 datasheet: 8 GPUs, 8 x 200 Gb/s HDR InfiniBand for the
  compute fabric = 200 Gb/s = 25e9 bytes/s per GPU.
* NVIDIA DGX H100 / DGX H200 / DGX B200 datasheets: 8 GPUs, 8 x 400 Gb/s
  ConnectX-7 (InfiniBand NDR) = 400 Gb/s = 50e9 bytes/s per GPU.

Memory is the datasheet's decimal gigabytes (10^9 bytes); a real 80 GB part
exposes about 80 GiB, so this is slightly conservative. Pass your own
numbers with a JSON file (:func:`hardware_from_file`) or overrides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from piper.core.errors import HardwareError
from piper.core.limits import MAX_COUNT, MAX_MAGNITUDE, MIN_POSITIVE
from piper.io.jsonfile import read_json

__all__ = [
    "Accelerator",
    "NodeType",
    "Hardware",
    "ACCELERATORS",
    "ALIASES",
    "NODE_TYPES",
    "accelerator",
    "hardware",
    "hardware_from_file",
]


@dataclass(frozen=True)
class Accelerator:
    """One device: its peak dense bf16 compute (FLOP/s) and memory (bytes)."""

    name: str
    peak_flops: float
    memory_bytes: float
    #: the node type it ships in by default (a key of :data:`NODE_TYPES`)
    default_node: str


@dataclass(frozen=True)
class NodeType:
    """A server of identical devices joined by NVLink and linked out by a network."""

    name: str
    devices_per_node: int
    #: NVLink bytes/s per device and direction (inside the node)
    nvlink_bandwidth: float
    #: network bytes/s per device and direction (between nodes)
    network_bandwidth: float


ACCELERATORS: dict[str, Accelerator] = {
    "a100-40gb": Accelerator("a100-40gb", 312e12, 40e9, "dgx-a100"),
    "a100-80gb": Accelerator("a100-80gb", 312e12, 80e9, "dgx-a100"),
    "h100-sxm-80gb": Accelerator("h100-sxm-80gb", 989e12, 80e9, "dgx-h100"),
    "h200": Accelerator("h200", 989e12, 141e9, "dgx-h200"),
    "b200": Accelerator("b200", 2.25e15, 180e9, "dgx-b200"),
}
ALIASES: dict[str, str] = {"h100": "h100-sxm-80gb"}

NODE_TYPES: dict[str, NodeType] = {
    "dgx-a100": NodeType("dgx-a100", 8, 300e9, 25e9),
    "dgx-h100": NodeType("dgx-h100", 8, 450e9, 50e9),
    "dgx-h200": NodeType("dgx-h200", 8, 450e9, 50e9),
    "dgx-b200": NodeType("dgx-b200", 8, 900e9, 50e9),
}


@dataclass(frozen=True)
class Hardware:
    """The numbers the cost model uses: one accelerator kind in nodes of ``devices_per_node``."""

    name: str
    #: peak dense bf16 FLOP/s of one device
    peak_flops: float
    #: memory of one device, bytes
    memory_bytes: float
    devices_per_node: int
    #: NVLink bytes/s per device and direction
    nvlink_bandwidth: float
    #: network bytes/s per device and direction
    network_bandwidth: float

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise HardwareError(f"hardware {self.name}: {f.name} must be a positive number, got {value!r}")
            if f.name == "devices_per_node" and (not float(value).is_integer()):
                raise HardwareError(f"hardware {self.name}: devices_per_node must be a whole number, got {value!r}")
        object.__setattr__(self, "devices_per_node", int(self.devices_per_node))

    def with_changes(self, **changes: Any) -> "Hardware":
        """A copy with the given numbers replaced; ``None`` values are ignored."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise HardwareError(f"unknown hardware field(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def accelerator(name: str) -> Accelerator:
    """The catalog entry for ``name`` (case-insensitive; ``h100`` is ``h100-sxm-80gb``)."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in ACCELERATORS:
        known = ", ".join([*ACCELERATORS, *ALIASES])
        raise HardwareError(f"unknown GPU {name!r}; known GPUs: {known}")
    return ACCELERATORS[key]


def hardware(gpu: str = "a100-80gb", node: str | None = None, **overrides: Any) -> Hardware:
    """Hardware for ``gpu`` in its default node type (or ``node``), with overrides applied."""
    acc = accelerator(gpu)
    node_key = (node or acc.default_node).strip().lower()
    if node_key not in NODE_TYPES:
        raise HardwareError(f"unknown node type {node!r}; known: {', '.join(NODE_TYPES)}")
    nt = NODE_TYPES[node_key]
    hw = Hardware(
        name=acc.name,
        peak_flops=acc.peak_flops,
        memory_bytes=acc.memory_bytes,
        devices_per_node=nt.devices_per_node,
        nvlink_bandwidth=nt.nvlink_bandwidth,
        network_bandwidth=nt.network_bandwidth,
    )
    return hw.with_changes(**overrides)


def hardware_from_file(path: str | Path, **overrides: Any) -> Hardware:
    """Hardware from a JSON object with the :class:`Hardware` field names.

    ``"gpu"`` (and ``"node"``) name a catalog entry to start from; the other
    keys replace its numbers. Without ``"gpu"`` every number must be given.
    Example: ``{"gpu": "h100", "memory_bytes": 94e9, "network_bandwidth": 25e9}``.
    """
    raw = read_json(path, HardwareError, "hardware")
    if not isinstance(raw, dict):
        raise HardwareError(f"{path}: the hardware file must hold a JSON object")
    raw = dict(raw)
    for key, value in raw.items():
        if key in ("gpu", "node", "name"):
            if not isinstance(value, str):
                raise HardwareError(f"{path}: {key} must be a string, got {value!r:.60}")
        elif (isinstance(value, (int, float)) and not isinstance(value, bool)
              and not MIN_POSITIVE <= value <= (MAX_COUNT if key == "devices_per_node" else MAX_MAGNITUDE)):
            top = MAX_COUNT if key == "devices_per_node" else f"{MAX_MAGNITUDE:g}"
            raise HardwareError(f"{path}: {key} must be > 0 and <= {top}, got {value!r:.60}")
    gpu, node = raw.pop("gpu", None), raw.pop("node", None)
    if gpu is not None:
        base = hardware(str(gpu), None if node is None else str(node), **raw)
    else:
        need = [f.name for f in fields(Hardware) if f.name != "name" and f.name not in raw]
        if need:
            raise HardwareError(f"{path}: without \"gpu\" the file must give {', '.join(need)}")
        extra = set(raw) - {f.name for f in fields(Hardware)}
        if extra:
            raise HardwareError(f"{path}: unknown key(s) {', '.join(sorted(extra))}")
        base = Hardware(name=str(raw.pop("name", Path(path).stem)), **raw)
    return base.with_changes(**overrides)
