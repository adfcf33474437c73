"""The model front end: Piper workloads from a transformer description and hardware.

Data flows one way: a :class:`TransformerConfig` (a preset or a Hugging Face
``config.json``) and a :class:`Hardware` (catalog entry or user numbers) and a
:class:`TrainingSetup` -> :func:`build_workload` -> the workload JSON object
(docs/problem.md §2, version 2) -> :func:`piper.load_problem`.

Modules: ``config`` (the model dataclass), ``moe`` (mixture of experts and MLA: description and parameter
counts), ``moe_costs`` (their layers' costs and TMPCs), ``presets``, ``hf`` (config.json),
``hardware`` (catalog), ``costs`` (formulas, with their papers),
``tmpc`` (TMPC ids), ``node_cost`` (a node's cost record), ``workload`` (the graph),
``context`` (context parallelism, docs/frontend.md), ``summary``, ``cli``.
"""

from piper.core.errors import FrontendError, HardwareError, ModelConfigError
from piper.frontend.config import TransformerConfig
from piper.frontend.costs import (
    active_params,
    hardware_flops_per_iteration,
    layer_activation_bytes,
    layer_params,
    model_flops_per_iteration,
    model_params,
    sc21_flops_per_iteration,
    sc21_params,
)
from piper.frontend.hardware import (
    ACCELERATORS,
    NODE_TYPES,
    Hardware,
    hardware,
    hardware_from_file,
)
from piper.frontend.hf import config_from_hf, load_hf_config
from piper.frontend.moe import MLAConfig, MoEConfig
from piper.frontend.presets import PRESETS, preset, preset_names
from piper.frontend.summary import model_summary
from piper.frontend.tmpc import parse_tmpc_id, tmpc_id, tmpc_ids
from piper.frontend.workload import (
    TrainingSetup,
    all_reduce_factor,
    build_workload,
    tensor_parallel_degrees,
)

__all__ = [
    "ACCELERATORS",
    "NODE_TYPES",
    "PRESETS",
    "FrontendError",
    "Hardware",
    "HardwareError",
    "MLAConfig",
    "MoEConfig",
    "ModelConfigError",
    "TrainingSetup",
    "TransformerConfig",
    "active_params",
    "all_reduce_factor",
    "build_workload",
    "config_from_hf",
    "hardware",
    "hardware_flops_per_iteration",
    "hardware_from_file",
    "layer_activation_bytes",
    "layer_params",
    "load_hf_config",
    "model_flops_per_iteration",
    "model_params",
    "model_summary",
    "parse_tmpc_id",
    "preset",
    "preset_names",
    "sc21_flops_per_iteration",
    "sc21_params",
    "tensor_parallel_degrees",
    "tmpc_id",
    "tmpc_ids",
]
