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

* HBM bandwidth (datasheets): A100 40 GB 1,555 GB/s, A100 80 GB SXM 2,039 GB/s, H100 SXM
  3.35 TB/s, H200 4.8 TB/s, B200 8 TB/s. FP8 dense peaks: H100/H200 1,979 TFLOP/s (3,958 with
  sparsity), B200 4.5 PFLOP/s; A100 has no FP8 tensor cores (``peak_flops_fp8`` None).
* Memory: what programs see, ``nvidia-smi``'s memory.total: 40,960 / 81,920 MiB (A100),
  81,559 MiB (H100 SXM), 143,771 MiB (H200), 183,359 MiB (B200, approximate).
* ``memory_efficiency``: streaming kernels reach about 85% (A100) and 90% (H100 and later) of
  the HBM bandwidth (BabelStream-style measurements; approximate, not fitted).
* ``gemm_efficiency`` (e_max) and ``gemm_half_dim`` (d0): FITTED on the published rows by
  ``python -m experiments.validate`` (docs/results/validation.md), recorded in :data:`FITTED_GEMM`
  with the rows and their leave-one-out error; that command reports a drift when its fit moves
  away from these values. a100-80gb: on [SC21] Table 1; h100-sxm-80gb: on the Megatron-LM
  README's H100 weak-scaling table. The other devices keep the unfitted starting values 0.75
  (A100 40 GB) / 0.70 (H200, B200) and d0 = 48; ``plan`` and ``score`` print a caveat for them
  (:func:`unfitted_gemm_caveat`, piper/frontend/caveats.py).
* ``flash_attention_efficiency``: Dao, FlashAttention-2 (2023): 50-73% of A100 peak (0.60);
  Shah et al., FlashAttention-3 (2024): up to 75% of H100 peak forward, less backward (0.50).
* Collectives (per node type): bus-bandwidth efficiency = nccl-tests busbw / link bandwidth
  (nccl-tests' busbw; figures and sources in experiments/data/collective_bandwidth.md): about 230 of 300 GB/s NVLink on DGX
  A100 (0.78) and 360 of 450 on DGX H100 (0.80); 0.90-0.92 of the InfiniBand links between
  nodes; latencies 15 us (NVLink) and 30 us (network) per collective. Approximate published
  figures, not fitted. ``kernel_overhead_s`` 5 us per kernel (launch and tail).
* All-to-all (the MoE dispatch and combine, ``*_all_to_all_efficiency``): DeepEP's normal kernels
  on H800 (experiments/data/collective_bandwidth.md, from DeepEP's "Normal kernels with NVLink and RDMA
  forwarding", DeepSeek-V3's pre-training shape): intranode EP 8 153 GB/s dispatch and 158 GB/s
  combine over NVLink, i.e. 0.77 of H800's 200 GB/s each way; internode EP 16 43 GB/s of the
  ~50 GB/s CX7 400 Gb/s link (0.86). The same fractions are assumed on every node type (no
  published nccl-tests alltoall figure for DGX H100 was found); not fitted.
* MoE block (``expert_gemm_half_dim``, ``moe_layer_overhead_s``): FITTED on Megatron-Bridge's
  H100 MoE rows by ``python -m experiments.validate.moe_rows --fit`` (docs/results/validation.md),
  recorded in :data:`FITTED_MOE` with the rows and their leave-one-out error: the d0 of the
  experts' grouped products (their shapes, m = a few thousand rows, are far from the dense rows
  d0 is fitted on) and a fixed time per MoE layer and pass (router, top-k, permutation, load
  balancing: what the operation list does not price). The form is the one with the least
  leave-one-out error (``experiments.validate.moe_rows.MOE_FORMS``): a time per routed token copy
  (``moe_token_overhead_s``) in its place, or both, fitted worse on the current rows (it was the
  catalog's form until 2026-12-04); the per-local-expert time (``expert_overhead_s``) is 0. Other
  devices: d0 of the dense products, none of the three times.

Pass your own numbers with a JSON file (:func:`hardware_from_file`, any field of
:class:`Hardware`; a bad field is one line naming it) or overrides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from piper.core.errors import HardwareError
from piper.core.limits import MAX_COUNT, MAX_MAGNITUDE, MIN_FRACTION, MIN_POSITIVE, MIN_RATE
from piper.io.jsonfile import read_json

__all__ = [
    "ACCELERATORS",
    "ALIASES",
    "COLLECTIVES",
    "FITTED_GEMM",
    "FITTED_MOE",
    "LINKS",
    "NODE_TYPES",
    "Accelerator",
    "FittedGemm",
    "FittedMoE",
    "Hardware",
    "NodeType",
    "accelerator",
    "hardware",
    "hardware_from_file",
    "unfitted_gemm_caveat",
]


@dataclass(frozen=True)
class Accelerator:
    """One device: peaks, memory, and the efficiency curves of its kernels (see the module
    docstring for every number's source)."""

    name: str
    #: dense BF16 tensor-core peak, FLOP/s
    peak_flops: float
    #: memory exposed to programs (``nvidia-smi`` memory.total), bytes
    memory_bytes: float
    #: the node type it ships in by default (a key of :data:`NODE_TYPES`)
    default_node: str
    #: dense FP8 tensor-core peak, FLOP/s (None: no FP8 tensor cores)
    peak_flops_fp8: float | None
    #: HBM bandwidth, bytes/s (datasheet)
    memory_bandwidth: float
    #: achieved fraction of the HBM bandwidth by streaming element-wise kernels
    memory_efficiency: float
    #: e_max: the fraction of peak a large matrix product reaches (fitted: see module docstring)
    gemm_efficiency: float
    #: fraction of peak of fused (flash) attention, forward and backward
    flash_attention_efficiency: float
    #: d0 of the matrix products' shape factor (fitted: see module docstring)
    gemm_half_dim: float = 48.0


@dataclass(frozen=True)
class FittedGemm:
    """Matrix-product constants fitted by ``python -m experiments.validate`` (module docstring)."""

    e_max: float
    d0: float
    #: the published rows they are fitted on
    rows: str
    #: mean absolute leave-one-out error of those rows' iteration times, percent
    loo_mae_percent: float
    #: the worst row's leave-one-out error, percent (signed)
    loo_worst_percent: float


#: per accelerator: the fitted e_max and d0 (the values of :data:`ACCELERATORS`), where fitted
FITTED_GEMM: dict[str, FittedGemm] = {
    # fitted on [SC21] Table 1 (10 rows, A100 80 GB), LOO MAE 2.3%, worst -5.4% (megatron-76b)
    "a100-80gb": FittedGemm(0.7332, 112.6, "[SC21] Table 1, 10 rows", 2.3, -5.4),
    # fitted on the Megatron-LM README H100 weak-scaling table (9 rows; micro-batch and v the score's choice,
    # docs/results/validation.md), LOO MAE 4.2%, worst +9.0% (gpt-314b)
    "h100-sxm-80gb": FittedGemm(0.7924, 1097.3, "Megatron-LM README H100 weak scaling, 9 rows", 4.2, 9.0),
}


@dataclass(frozen=True)
class FittedMoE:
    """The mixture-of-experts block's constants fitted by ``python -m experiments.validate.moe_rows --fit``
    (module docstring, "MoE block"): the :class:`Hardware` fields of the same names."""

    #: d0 of the experts' grouped products
    expert_gemm_half_dim: float
    #: seconds per local expert, MoE layer and pass
    expert_overhead_s: float
    #: seconds per MoE layer and pass
    moe_layer_overhead_s: float
    #: seconds per routed token copy on a device, MoE layer and pass
    moe_token_overhead_s: float
    #: the published rows they are fitted on
    rows: str
    #: mean absolute leave-one-out error of those rows' iteration times, percent
    loo_mae_percent: float
    #: the worst row's leave-one-out error, percent (signed)
    loo_worst_percent: float
    #: the most tokens per micro-batch among those rows (micro-batch x sequence): beyond it, how the
    #: fitted times grow with the micro-batch is an extrapolation (piper/frontend/moe_costs.py
    #: ``moe_micro_batch_caveat``)
    max_micro_batch_tokens: int = 0
    #: the runner-up form fitted on the same rows, as (Hardware field, value) pairs (the times it does not
    #: name are 0): ``plan`` re-prices its answer with it when the micro-batch is beyond the rows
    #: (piper/frontend/planner.py ``other_moe_form_s``)
    alternative: tuple[tuple[str, float], ...] = ()
    #: that form in words, with its leave-one-out error
    alternative_words: str = ""

    def hardware_fields(self) -> dict[str, float]:
        """The :class:`Hardware` fields."""
        return {"expert_gemm_half_dim": self.expert_gemm_half_dim, "expert_overhead_s": self.expert_overhead_s,
                "moe_layer_overhead_s": self.moe_layer_overhead_s, "moe_token_overhead_s": self.moe_token_overhead_s}

    def alternative_fields(self) -> dict[str, float]:
        """The :class:`Hardware` fields of :attr:`alternative` (its times, the others 0); {} without one."""
        if not self.alternative:
            return {}
        return {**{k: 0.0 for k in self.hardware_fields() if k.endswith("_s")}, **dict(self.alternative)}


#: per accelerator: the fitted MoE-block constants, where fitted (module docstring, "MoE block")
FITTED_MOE: dict[str, FittedMoE] = {
    # fitted on Megatron-Bridge's H100 MoE rows (9 of 11: Qwen3 26.02 and 25.11 excluded, superseded by 26.02.01
    # of the same parallel layout; docs/results/validation.md), with GPT-OSS's recipe recomputation (layernorm,
    # moe_act) and no expert outputs kept for the combine (Megatron-Core 0.13+): LOO MAE 3.3%, worst +8.6%
    # (gpt-oss-120b 25.11's time). The form with the least LOO error: a fixed time per MoE layer and pass;
    # per routed token copy instead (721.7, 38.93 ns): LOO MAE 5.8%, worst +21.1%; both: 4.2% (the fit puts the
    # per-token time at 0). Until 2026-12-04: the per-token form, 695.7 and 46.35 ns, LOO MAE 7.5% on 10 rows
    "h100-sxm-80gb": FittedMoE(508.1, 0.0, 1.529e-3, 0.0, "Megatron-Bridge H100 MoE rows (Qwen3 30B-A3B, "
                               "GPT-OSS 120B), 9 rows", 3.3, 8.6, 4 * 4096,
                               (("expert_gemm_half_dim", 721.7), ("moe_token_overhead_s", 3.893e-8)),
                               "38.93 ns per routed token copy and pass, d0 721.7: LOO MAE 5.8%"),
}


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
    "a100-40gb": Accelerator("a100-40gb", 312e12, 40960 * 2**20, "dgx-a100", None, 1555e9, 0.85, 0.75, 0.60),
    "a100-80gb": Accelerator("a100-80gb", 312e12, 81920 * 2**20, "dgx-a100", None, 2039e9, 0.85,
                             FITTED_GEMM["a100-80gb"].e_max, 0.60, FITTED_GEMM["a100-80gb"].d0),
    "h100-sxm-80gb": Accelerator("h100-sxm-80gb", 989e12, 81559 * 2**20, "dgx-h100", 1979e12, 3350e9, 0.90,
                                 FITTED_GEMM["h100-sxm-80gb"].e_max, 0.50, FITTED_GEMM["h100-sxm-80gb"].d0),
    "h200": Accelerator("h200", 989e12, 143771 * 2**20, "dgx-h200", 1979e12, 4800e9, 0.90, 0.70, 0.50),
    "b200": Accelerator("b200", 2.25e15, 183359 * 2**20, "dgx-b200", 4.5e15, 8000e9, 0.90, 0.70, 0.50),
}
ALIASES: dict[str, str] = {"h100": "h100-sxm-80gb"}

NODE_TYPES: dict[str, NodeType] = {
    "dgx-a100": NodeType("dgx-a100", 8, 300e9, 25e9),
    "dgx-h100": NodeType("dgx-h100", 8, 450e9, 50e9),
    "dgx-h200": NodeType("dgx-h200", 8, 450e9, 50e9),
    "dgx-b200": NodeType("dgx-b200", 8, 900e9, 50e9),
}

#: collectives priced per link: bus-bandwidth efficiency = achieved nccl-tests busbw / link bandwidth
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "p2p", "all_to_all")
#: link kinds
LINKS = ("nvlink", "network")

#: fields that may be absent (None) in a Hardware
_OPTIONAL = {"peak_flops_fp8", "memory_bandwidth", "expert_gemm_half_dim"}
#: fields that are fractions in (0, 1]
_FRACTIONS = {"memory_efficiency", "gemm_efficiency", "flash_attention_efficiency",
              *(f"{link}_{c}_efficiency" for link in LINKS for c in COLLECTIVES)}
#: fields that are rates per second, at least MIN_RATE (FLOP/s, bytes/s)
_RATES = {"peak_flops", "peak_flops_fp8", "memory_bandwidth", "nvlink_bandwidth", "network_bandwidth"}
#: fields that are >= 0 (latencies, a dimension)
_NON_NEGATIVE = {"gemm_half_dim", "expert_gemm_half_dim", "nvlink_latency_s", "network_latency_s", "kernel_overhead_s", "expert_overhead_s",
                 "moe_layer_overhead_s", "moe_token_overhead_s"}


@dataclass(frozen=True)
class Hardware:
    """The numbers the cost model uses: one accelerator kind in nodes of ``devices_per_node``.

    Only the first six fields are required; the others default to an *ideal* device (every
    kernel at the given efficiency, no latency, element-wise operations free when
    ``memory_bandwidth`` is None), so a hand-made Hardware prices FLOPs and bytes only.
    The catalog (:func:`hardware`) fills every field from the sources of the module docstring.
    """

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
    #: peak dense FP8 FLOP/s (None: the device has no FP8 tensor cores; ``--precision fp8`` is refused)
    peak_flops_fp8: float | None = None
    #: HBM bytes/s (None: element-wise operations are not priced)
    memory_bandwidth: float | None = None
    #: achieved fraction of ``memory_bandwidth`` by element-wise kernels
    memory_efficiency: float = 1.0
    #: e_max, the fraction of peak a large matrix product reaches
    gemm_efficiency: float = 1.0
    #: d0 of the shape factor prod_x x / (x + d0) over a product's m, n, k (0: no shape penalty)
    gemm_half_dim: float = 0.0
    #: fraction of peak of fused (flash) attention kernels
    flash_attention_efficiency: float = 1.0
    #: fixed time per kernel launch, seconds (0: none)
    kernel_overhead_s: float = 0.0
    nvlink_all_reduce_efficiency: float = 1.0
    nvlink_reduce_scatter_efficiency: float = 1.0
    nvlink_all_gather_efficiency: float = 1.0
    nvlink_p2p_efficiency: float = 1.0
    network_all_reduce_efficiency: float = 1.0
    network_reduce_scatter_efficiency: float = 1.0
    network_all_gather_efficiency: float = 1.0
    network_p2p_efficiency: float = 1.0
    #: bus efficiency of the MoE dispatch / combine all-to-all (piper/frontend/moe_costs.py ``all_to_all_time_s``)
    nvlink_all_to_all_efficiency: float = 1.0
    network_all_to_all_efficiency: float = 1.0
    #: d0 of the experts' grouped products' shape factor (None: ``gemm_half_dim``, the dense products')
    expert_gemm_half_dim: float | None = None
    #: fixed seconds per local expert, MoE layer and pass (forward, backward, recomputation) (0: none)
    expert_overhead_s: float = 0.0
    #: fixed seconds per MoE layer and pass: router, token counts, permutation bookkeeping (0: none)
    moe_layer_overhead_s: float = 0.0
    #: seconds per routed token copy (a token sent to one of its k experts) on the device, per MoE
    #: layer and pass: router scores, top-k, permutation and its inverse, whatever scales with the
    #: routed tokens and the operation list does not price (0: none)
    moe_token_overhead_s: float = 0.0
    #: time of one collective or send that moves no bytes, seconds, per link kind
    nvlink_latency_s: float = 0.0
    network_latency_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(value, str) or not value:
                    raise HardwareError(f"hardware: name must be a non-empty string, got {value!r}")
                continue
            if value is None and f.name in _OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise HardwareError(f"hardware {self.name}: {f.name} must be a finite number, got {value!r}")
            if f.name in _NON_NEGATIVE:
                if value < 0:
                    raise HardwareError(f"hardware {self.name}: {f.name} must be >= 0, got {value!r}")
            elif value <= 0:
                raise HardwareError(f"hardware {self.name}: {f.name} must be a positive number, got {value!r}")
            if f.name in _FRACTIONS and not MIN_FRACTION <= value <= 1:
                raise HardwareError(f"hardware {self.name}: {f.name} must be in [{MIN_FRACTION:g}, 1], got {value!r}")
            if f.name in _RATES and value < MIN_RATE:
                raise HardwareError(f"hardware {self.name}: {f.name} must be at least {MIN_RATE:g} per second, "
                                    f"got {value!r}")
            if f.name == "devices_per_node" and (not float(value).is_integer()):
                raise HardwareError(f"hardware {self.name}: devices_per_node must be a whole number, got {value!r}")
        object.__setattr__(self, "devices_per_node", int(self.devices_per_node))

    def with_changes(self, **changes: Any) -> Hardware:
        """A copy with the given numbers replaced; ``None`` values are ignored."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise HardwareError(f"unknown hardware field(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def collective_efficiency(self, link: str, collective: str) -> float:
        """Bus-bandwidth efficiency of ``collective`` on ``link`` ("nvlink" or "network")."""
        return float(getattr(self, f"{link}_{collective}_efficiency"))

    def link_bandwidth(self, link: str) -> float:
        return self.nvlink_bandwidth if link == "nvlink" else self.network_bandwidth

    def link_latency_s(self, link: str) -> float:
        return self.nvlink_latency_s if link == "nvlink" else self.network_latency_s

    def peak(self, precision: str = "bf16") -> float:
        """Peak dense FLOP/s of matrix products at ``precision`` ("bf16" or "fp8")."""
        if precision == "fp8":
            if self.peak_flops_fp8 is None:
                raise HardwareError(f"hardware {self.name}: peak_flops_fp8 is not given (no FP8 tensor cores): "
                                    "precision fp8 needs it")
            return self.peak_flops_fp8
        return self.peak_flops

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: the MoE all-to-all's bus efficiencies (module docstring, "All-to-all"): DeepEP's normal kernels on H800
#: (experiments/data/collective_bandwidth.md, DeepEP's "Normal kernels with NVLink and RDMA forwarding"): intranode EP 8
#: dispatch 153 GB/s of the 200 GB/s NVLink each way (0.77; combine 158, 0.79), internode EP 16 43 GB/s
#: of the ~50 GB/s CX7 400 Gb/s link (0.86, dispatch and combine); the lower of each pair
ALL_TO_ALL_EFFICIENCY = {"nvlink_all_to_all_efficiency": 0.77, "network_all_to_all_efficiency": 0.86}
#: per node type: NCCL bus-bandwidth efficiencies and latencies (module docstring, "Collectives")
_LINK_NUMBERS: dict[str, dict[str, float]] = {
    "dgx-a100": dict(
        nvlink_all_reduce_efficiency=0.78, nvlink_reduce_scatter_efficiency=0.78, nvlink_all_gather_efficiency=0.78,
        nvlink_p2p_efficiency=0.75, network_all_reduce_efficiency=0.92, network_reduce_scatter_efficiency=0.92,
        network_all_gather_efficiency=0.92, network_p2p_efficiency=0.90, nvlink_latency_s=15e-6,
        network_latency_s=30e-6, **ALL_TO_ALL_EFFICIENCY),
    "dgx-h100": dict(
        nvlink_all_reduce_efficiency=0.80, nvlink_reduce_scatter_efficiency=0.80, nvlink_all_gather_efficiency=0.80,
        nvlink_p2p_efficiency=0.75, network_all_reduce_efficiency=0.90, network_reduce_scatter_efficiency=0.90,
        network_all_gather_efficiency=0.90, network_p2p_efficiency=0.90, nvlink_latency_s=15e-6,
        network_latency_s=30e-6, **ALL_TO_ALL_EFFICIENCY),
}
_LINK_NUMBERS["dgx-h200"] = _LINK_NUMBERS["dgx-h100"]
_LINK_NUMBERS["dgx-b200"] = _LINK_NUMBERS["dgx-h100"]
#: fixed cost of one kernel launch on every catalog GPU, seconds (module docstring)
KERNEL_OVERHEAD_S = 5e-6
#: the shape factor's d0 of the catalog GPUs without a fit (module docstring)
GEMM_HALF_DIM = 48.0


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
    # every field of the accelerator (but its default node) and of the node type (but its name)
    # is the Hardware field of the same name
    device = {f.name: getattr(acc, f.name) for f in fields(Accelerator) if f.name != "default_node"}
    server = {f.name: getattr(nt, f.name) for f in fields(NodeType) if f.name != "name"}
    hw = Hardware(**device, **server, kernel_overhead_s=KERNEL_OVERHEAD_S, **_LINK_NUMBERS[nt.name],
                  **(FITTED_MOE[acc.name].hardware_fields() if acc.name in FITTED_MOE else {}))
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
              and not (key in _NON_NEGATIVE and value == 0)  # "none" (latencies, overheads, half dims)
              # rates and fractions above 0 meet the Hardware check's own floors (MIN_RATE, MIN_FRACTION)
              and not (key in _RATES | _FRACTIONS and 0 < value <= MAX_MAGNITUDE)
              and not MIN_POSITIVE <= value <= (MAX_COUNT if key == "devices_per_node" else MAX_MAGNITUDE)):
            top = MAX_COUNT if key == "devices_per_node" else f"{MAX_MAGNITUDE:g}"
            low = ">= 0" if key in _NON_NEGATIVE else "> 0"
            raise HardwareError(f"{path}: {key} must be {low} and <= {top}, got {value!r:.60}")
    try:
        base = _hardware_from_fields(raw, path)
    except HardwareError as exc:
        text = str(exc)
        # a field the Hardware check refused: say which file it came from
        raise HardwareError(text if text.startswith(str(path)) else f"{path}: {text}") from None
    return base.with_changes(**overrides)  # the callers' flags: their errors are not the file's


def _hardware_from_fields(raw: dict[str, Any], path: str | Path) -> Hardware:
    """:func:`hardware_from_file`'s Hardware from the file's fields (``"gpu"`` and ``"node"`` included)."""
    gpu, node = raw.pop("gpu", None), raw.pop("node", None)
    if gpu is not None:
        base = hardware(str(gpu), None if node is None else str(node), **raw)
    else:
        import dataclasses

        need = [f.name for f in fields(Hardware)
                if f.name != "name" and f.default is dataclasses.MISSING and f.name not in raw]
        if need:
            raise HardwareError(f"{path}: without \"gpu\" the file must give {', '.join(need)}")
        extra = set(raw) - {f.name for f in fields(Hardware)}
        if extra:
            raise HardwareError(f"{path}: unknown key(s) {', '.join(sorted(extra))}")
        base = Hardware(name=str(raw.pop("name", Path(path).stem)), **raw)
    return base


def unfitted_gemm_caveat(hw: Hardware) -> str | None:
    """One line when ``hw`` prices matrix products with a catalog device's unfitted starting values
    (e_max and d0 as in :data:`ACCELERATORS`, the device absent from :data:`FITTED_GEMM`): no
    published run checks its predictions, so their error is unknown. None for a fitted device or
    when the numbers are the user's own (a hardware file or overrides that change either)."""
    acc = ACCELERATORS.get(hw.name)
    if acc is None or acc.name in FITTED_GEMM:
        return None
    if (hw.gemm_efficiency, hw.gemm_half_dim) != (acc.gemm_efficiency, acc.gemm_half_dim):
        return None
    fitted = ", ".join(FITTED_GEMM)
    return (f"{hw.name}'s matrix-product efficiency is the catalog's unfitted starting value (e_max "
            f"{acc.gemm_efficiency:g}, d0 {acc.gemm_half_dim:g}): no published run checks predictions on it, so "
            f"their error is unknown (fitted: {fitted}; a hardware file can set gemm_efficiency and gemm_half_dim)")

