"""The published tables ([SC21] Table 1, [L3] Table 4) in ``experiments/data/``, as typed rows."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: experiments/data/ (this package is experiments/megatron/)
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
TABLE1_CSV = DATA_DIR / "megatron_sc21_table1.csv"
LLAMA3_CSV = DATA_DIR / "llama3_table4.csv"


@dataclass(frozen=True)
class Table1Row:
    """One row of [SC21] Table 1 (counts; TFLOP/s per GPU; PFLOP/s aggregate)."""

    model: str
    params_billion: float
    attention_heads: int
    hidden_size: int
    layers: int
    tensor_parallel: int
    pipeline_parallel: int
    gpus: int
    #: sequences per iteration
    global_batch: int
    #: sequences per micro-batch
    micro_batch: int
    #: layers per virtual stage of the interleaved schedule (None: not interleaved)
    virtual_stage_layers: int | None
    tflops_per_gpu: float
    percent_of_peak: float
    aggregate_pflops: float

    @property
    def data_parallel(self) -> int:
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel)


def load_table1(path: str | Path = TABLE1_CSV) -> list[Table1Row]:
    """[SC21] Table 1 as typed rows, in the paper's order."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            out.append(Table1Row(
                model=r["model"], params_billion=float(r["params_billion"]),
                attention_heads=int(r["attention_heads"]), hidden_size=int(r["hidden_size"]), layers=int(r["layers"]),
                tensor_parallel=int(r["tensor_parallel"]), pipeline_parallel=int(r["pipeline_parallel"]),
                gpus=int(r["gpus"]), global_batch=int(r["global_batch"]), micro_batch=int(r["micro_batch"]),
                virtual_stage_layers=int(r["virtual_stage_layers"]) if r["virtual_stage_layers"].strip() else None,
                tflops_per_gpu=float(r["tflops_per_gpu"]), percent_of_peak=float(r["percent_of_peak"]),
                aggregate_pflops=float(r["aggregate_pflops"]),
            ))
    return out


def load_llama3(path: str | Path = LLAMA3_CSV) -> list[dict[str, Any]]:
    """[L3] Table 4 rows (numbers as int/float where they are numbers)."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            row: dict[str, Any] = {}
            for k, v in r.items():
                try:
                    row[k] = int(v)
                except ValueError:
                    try:
                        row[k] = float(v)
                    except ValueError:
                        row[k] = v
            out.append(row)
    return out
