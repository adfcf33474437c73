"""Measure one transformer layer's forward and backward pass, and the matrix products it is made of,
on the GPU this runs on (issue 30's device measurement). Standalone: PyTorch and the standard
library only, so that it runs on the lent accelerator machine as it is (no piper import there).

    python experiments/device/measure_layer.py --out $OUT/layer_timings.json     # on the GPU
    python experiments/device/measure_layer.py --tiny --device cpu --out x.json  # a smoke run here

What one row measures: the per-device shard of one layer at tensor-parallel width t, as
Megatron-LM runs it on each of the t devices, without the collectives (they need t devices; the
model prices them apart): norm, the QKV product (h -> (a + 2 g) d / t), rotary embedding (Llama),
causal fused attention over a / t heads (``torch.nn.functional.scaled_dot_product_attention``:
FlashAttention or cuDNN, whichever PyTorch picks; grouped-query heads with ``enable_gqa``), the
output projection ((a d / t) -> h), dropout where the model has it (GPT-3), the residual adds, the
MLP (SwiGLU: h -> 2 f / t, f / t -> h; GELU: h -> f / t, f / t -> h) with biases where the model has
them. No sequence parallelism (the norms run on all b s tokens). The forward pass is timed with
autograd recording (as in training), the backward pass alone (after an untimed forward pass); each
the median of ``--repeats`` timed runs after ``--warmup`` untimed ones, CUDA events on a GPU.

The matrix products: each forward product of the layer shards above (m = b s tokens, n x k the
weight) in BF16, and in FP8 (``torch._scaled_mm``, E4M3 operands, per-tensor scales, BF16 out)
where the GPU has it (compute capability >= 8.9; and in a ``--tiny`` CPU run, to exercise the call); FLOP/s per product = 2 m n k / time.

Output: one JSON object (date, GPU, driver, PyTorch, CUDA, cuDNN, the attention backend; then
``layers`` and ``gemms`` rows); ``python -m experiments.device.compare_layer`` compares it with
the cost model. The shapes are those of the presets llama3-8b, llama3-70b and gpt3-175b
(piper/frontend/presets.py), written out here so that the script needs nothing else.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import time

#: the layers measured (the presets' shapes: hidden h, heads a, KV heads g, FFN width f, the MLP's
#: kind, the norm, biases, dropout)
MODELS = {
    "llama3-8b": {"h": 4096, "a": 32, "g": 8, "f": 14336, "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
                  "dropout": False, "rotary": True},
    "llama3-70b": {"h": 8192, "a": 64, "g": 8, "f": 28672, "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
                   "dropout": False, "rotary": True},
    "gpt3-175b": {"h": 12288, "a": 96, "g": 96, "f": 49152, "mlp": "gelu", "norm": "layernorm", "bias": True,
                  "dropout": True, "rotary": False},
}
#: (micro-batch b, sequence s) per model
BATCHES = {"llama3-8b": [(1, 4096), (2, 4096), (1, 8192)],
           "llama3-70b": [(1, 4096), (2, 4096), (1, 8192)],
           "gpt3-175b": [(1, 2048), (2, 2048), (1, 4096)]}
WIDTHS = (1, 2, 4, 8)
#: --tiny: every dimension divided by this (a smoke run on a CPU)
TINY_DIVISOR = 64
DROPOUT = 0.1


def _tiny(spec: dict) -> dict:
    out = dict(spec)
    for key in ("h", "f"):
        out[key] = max(64, spec[key] // TINY_DIVISOR)
    out["a"] = max(max(WIDTHS), spec["a"] // 4)
    out["g"] = spec["g"] // 4 if spec["g"] < spec["a"] else out["a"]  # grouped-query heads stay grouped
    return out


def _shard(spec: dict, t: int) -> dict:
    """The per-device numbers at width t (Megatron-LM: heads, KV heads and FFN split t ways)."""
    d = spec["h"] // spec["a"]
    return {"heads": spec["a"] // t, "kv_heads": max(1, spec["g"] // t), "head_dim": d, "ffn": spec["f"] // t}


def _build(torch, spec: dict, t: int, dtype, device):
    nn, F = torch.nn, torch.nn.functional
    sh = _shard(spec, t)
    h, d = spec["h"], sh["head_dim"]
    q_n, kv_n = sh["heads"] * d, sh["kv_heads"] * d

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h, device=device, dtype=dtype))
            self.bias = nn.Parameter(torch.zeros(h, device=device, dtype=dtype)) if spec["norm"] == "layernorm" else None

        def forward(self, x):
            if self.bias is not None:
                return F.layer_norm(x, (h,), self.weight, self.bias)
            return F.rms_norm(x, (h,), self.weight)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            kw = {"bias": spec["bias"], "device": device, "dtype": dtype}
            self.norm1, self.norm2 = Norm(), Norm()
            self.qkv = nn.Linear(h, q_n + 2 * kv_n, **kw)
            self.proj = nn.Linear(q_n, h, **kw)
            self.fc1 = nn.Linear(h, (2 if spec["mlp"] == "swiglu" else 1) * sh["ffn"], **kw)
            self.fc2 = nn.Linear(sh["ffn"], h, **kw)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            y = self.qkv(self.norm1(x))
            q, k, v = y.split([q_n, kv_n, kv_n], dim=-1)
            q = q.view(b, s, sh["heads"], d).transpose(1, 2)
            k = k.view(b, s, sh["kv_heads"], d).transpose(1, 2)
            v = v.view(b, s, sh["kv_heads"], d).transpose(1, 2)
            if spec["rotary"]:
                q, k = _rotate(torch, q, cos, sin), _rotate(torch, k, cos, sin)
            p = DROPOUT if spec["dropout"] else 0.0
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p,
                                               enable_gqa=sh["kv_heads"] != sh["heads"])
            o = self.proj(o.transpose(1, 2).reshape(b, s, q_n))
            if spec["dropout"]:
                o = F.dropout(o, DROPOUT)
            x = x + o
            z = self.fc1(self.norm2(x))
            if spec["mlp"] == "swiglu":
                gate, up = z.chunk(2, dim=-1)
                z = F.silu(gate) * up
            else:
                z = F.gelu(z)
            z = self.fc2(z)
            if spec["dropout"]:
                z = F.dropout(z, DROPOUT)
            return x + z

    return Layer(), sh


def _rotate(torch, x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class _Timer:
    """Seconds of a callable: CUDA events on a GPU, the wall clock on a CPU."""

    def __init__(self, torch, device: str):
        self.torch, self.cuda = torch, device.startswith("cuda")

    def __call__(self, fn) -> float:
        if self.cuda:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _median(timer: _Timer, fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        timer(fn)
    return statistics.median(timer(fn) for _ in range(repeats))


def measure_layer(torch, name: str, spec: dict, t: int, b: int, s: int, dtype, device: str,
                  warmup: int, repeats: int) -> dict:
    layer, sh = _build(torch, spec, t, dtype, device)
    x = torch.randn(b, s, spec["h"], device=device, dtype=dtype, requires_grad=True)
    half = sh["head_dim"] // 2
    angle = torch.arange(s, device=device, dtype=torch.float32)[:, None] / (
        10000.0 ** (torch.arange(half, device=device, dtype=torch.float32) / half))
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    grad = torch.randn_like(x)
    timer = _Timer(torch, device)

    def forward():
        layer(x, cos, sin)

    def backward_s() -> float:
        # the backward pass alone: a fresh forward pass (untimed), then its backward pass timed
        out = layer(x, cos, sin)
        sec = timer(lambda: out.backward(grad))
        x.grad = None
        for prm in layer.parameters():
            prm.grad = None
        return sec

    fwd = _median(timer, forward, warmup, repeats)
    for _ in range(warmup):
        backward_s()
    bwd = statistics.median(backward_s() for _ in range(repeats))
    del layer, x, grad
    return {"model": name, "t": t, "micro_batch": b, "seq": s, "precision": "bf16" if dtype == torch.bfloat16 else "fp32",
            "heads": sh["heads"], "kv_heads": sh["kv_heads"], "head_dim": sh["head_dim"], "ffn": sh["ffn"],
            "hidden": spec["h"], "forward_s": fwd, "backward_s": bwd, "forward_backward_s": fwd + bwd}


def gemm_shapes(spec: dict, t: int, tokens: int) -> list[tuple[str, int, int, int]]:
    """(name, m, n, k) of the layer's forward products at width t: m tokens, the weight n x k."""
    sh = _shard(spec, t)
    q_n, kv_n = sh["heads"] * sh["head_dim"], sh["kv_heads"] * sh["head_dim"]
    fc1 = (2 if spec["mlp"] == "swiglu" else 1) * sh["ffn"]
    return [("qkv", tokens, q_n + 2 * kv_n, spec["h"]), ("proj", tokens, spec["h"], q_n),
            ("fc1", tokens, fc1, spec["h"]), ("fc2", tokens, spec["h"], sh["ffn"])]


def measure_gemm(torch, m: int, n: int, k: int, precision: str, device: str, warmup: int, repeats: int) -> float:
    """Seconds of one m x k by k x n product."""
    timer = _Timer(torch, device)
    if precision == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm asks
        one = torch.ones((), device=device)

        def fn():
            torch._scaled_mm(a, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
        a = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(k, n, device=device, dtype=dtype)

        def fn():
            torch.mm(a, w)
    return _median(timer, fn, warmup, repeats)


def environment(torch, device: str) -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "torch": torch.__version__, "device": device,
           "cuda": torch.version.cuda, "cudnn": None, "gpu": None, "driver": None, "compute_capability": None}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
        env["compute_capability"] = list(torch.cuda.get_device_capability())
        env["cudnn"] = torch.backends.cudnn.version()
        env["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                            "--format=csv,noheader"], capture_output=True, text=True,
                                           timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--tiny", action="store_true", help=f"every width / {TINY_DIVISOR}, short sequences: a smoke run")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="stop starting new rows after this many seconds (the rows so far are written)")
    args = ap.parse_args(argv)
    for flag, value, low in (("--warmup", args.warmup, 0), ("--repeats", args.repeats, 1)):
        if value < low:
            print(f"measure_layer: {flag} must be >= {low}, got {value}", file=sys.stderr)
            return 2
    if not (args.budget_s > 0 and math.isfinite(args.budget_s)):
        print(f"measure_layer: --budget-s must be a positive number of seconds, got {args.budget_s}", file=sys.stderr)
        return 2
    import torch

    started = time.perf_counter()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"measure_layer: unknown model {unknown[0]!r}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("measure_layer: no CUDA device (use --device cpu for a smoke run)", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    # FP8 products where the GPU has them (Ada, Hopper and later); a CPU smoke run calls them too
    fp8 = tuple(torch.cuda.get_device_capability()) >= (8, 9) if args.device.startswith("cuda") else args.tiny
    out = {"environment": environment(torch, args.device), "tiny": args.tiny, "warmup": args.warmup,
           "repeats": args.repeats, "layers": [], "gemms": [], "skipped": [], "complete": False}
    torch.manual_seed(0)

    def save() -> None:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)

    for name in names:
        spec = _tiny(MODELS[name]) if args.tiny else MODELS[name]
        for b, s in BATCHES[name]:
            s = s // TINY_DIVISOR if args.tiny else s
            for t in WIDTHS:
                if time.perf_counter() - started > args.budget_s:
                    out["skipped"].append({"model": name, "t": t, "micro_batch": b, "seq": s, "why": "budget"})
                    continue
                try:
                    row = measure_layer(torch, name, spec, t, b, s, dtype, args.device, args.warmup, args.repeats)
                except RuntimeError as exc:  # out of memory or a kernel refused: a row, not a crash
                    out["skipped"].append({"model": name, "t": t, "micro_batch": b, "seq": s,
                                           "why": str(exc).split("\n")[0][:200]})
                    continue
                out["layers"].append(row)
                print(f"{name} t={t} b={b} s={s}: forward {1e3 * row['forward_s']:.3f} ms, backward "
                      f"{1e3 * row['backward_s']:.3f} ms", file=sys.stderr, flush=True)
                for op, m, n, k in gemm_shapes(spec, t, b * s):
                    base = "bf16" if dtype == torch.bfloat16 else "fp32"
                    for precision in (base, "fp8") if fp8 else (base,):
                        sec = measure_gemm(torch, m, n, k, precision, args.device, args.warmup, args.repeats)
                        out["gemms"].append({"model": name, "t": t, "op": op, "m": m, "n": n, "k": k,
                                             "precision": precision, "time_s": sec,
                                             "flops_per_s": 2.0 * m * n * k / sec if sec > 0 else math.inf})
                save()
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    out["complete"] = not out["skipped"]
    out["elapsed_s"] = time.perf_counter() - started
    save()
    print(f"measure_layer: {len(out['layers'])} layer rows, {len(out['gemms'])} products, "
          f"{len(out['skipped'])} skipped, {out['elapsed_s']:.1f} s -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
