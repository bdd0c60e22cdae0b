"""GPU: HBM traffic of the fused-kernel plan, FLOPs by unit, and a per-kernel roofline time.

The program is planned by the GPU backend itself (:func:`circuitgrad.backends.gpu.plan.plan`):
each launch reads its input arrays from HBM and writes its outputs (views cost nothing, a fused
kernel's intermediates stay in registers), so the traffic is that of the code that runs. A
kernel's predicted time is ``launch + max(bytes / HBM bandwidth, tensor-core FLOPs / TC rate +
CUDA-core FLOPs / FP32 rate)`` on the device, or the host's time to issue the launch when that is
longer: ``max(issue[kind], launch + roofline)``. The host issues each launch from the generated
Python through CuPy, and a step of small kernels waits on the host, not on the device.

Device profiles are the vendors' datasheet figures (dense, without sparsity):

* ``h100`` — NVIDIA H100 SXM5 80 GB (*NVIDIA H100 Tensor Core GPU* datasheet, 2023): HBM3
  3.35 TB/s; FP32 67 TFLOPS; FP64 34 TFLOPS; TF32 tensor core 494.5 TFLOPS; BF16/FP16 989.5 TFLOPS;
  50 MB L2; 228 KB shared memory per SM, 132 SMs.
* ``h200`` — NVIDIA H200 SXM 141 GB (*NVIDIA H200 Tensor Core GPU* datasheet, 2024): HBM3e
  4.8 TB/s; the same compute as the H100 SXM.

The issue costs are measured (:data:`ISSUE_S`); the 4 µs kernel start on the device is an assumption,
and the HBM rate is the datasheet peak, which real kernels reach only in part.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from circuitgrad.costmodel.report import Cost, program_of, table
from circuitgrad.costmodel.work import Work, itemsize, work
from circuitgrad.types import Fixed, Float

from . import attention, memory
from .plan import plan
from .rounding import RoundBF16
from .host.emulate import emulated_kernel
from .runtime import GpuFunction, build

__all__ = ["Device", "DEVICES", "ISSUE_S", "estimate", "launch_cost"]

#: host seconds to issue one launch from the generated Python: a generated kernel (``RawKernel``: fused, row,
#: gather, copy and sum kernels) or a cuBLAS product (``xp.matmul``). Medians over the 238 launches of the three
#: models of ``bench/gpu_profile.py`` (CUDA events, net of the probes' own cost), CuPy 14.2, Python 3.12, on the
#: host of an H100 machine, 2026-11-27 (docs/BENCHMARKS.md)
ISSUE_S = {"kernel": 10.0e-6, "matmul": 28.8e-6}


@dataclass(frozen=True)
class Device:
    name: str
    hbm_bytes_s: float
    fp32_flops: float
    fp64_flops: float
    tf32_flops: float
    bf16_flops: float
    smem_bytes: int            # shared memory per SM (the "M" of the attention IO model)
    launch_s: float = 4e-6     # a kernel's start on the device (assumed)


DEVICES = {
    "h100": Device("NVIDIA H100 SXM5 80GB", 3.35e12, 67e12, 34e12, 494.5e12, 989.5e12, 228 * 1024),
    "h200": Device("NVIDIA H200 SXM 141GB", 4.8e12, 67e12, 34e12, 494.5e12, 989.5e12, 228 * 1024),
}


def launch_cost(p: Any, pl: Any, step: Any, dev: Device, precision: str = "fp32", graph: bool = False) -> dict:
    """HBM bytes, FLOPs by unit and predicted seconds of one launch (``step``) of the plan ``pl`` of ``p``
    (``roofline_s``: the device's work alone, without the launch). ``precision`` of float32 products:
    ``"fp32"`` on the CUDA cores, ``"tf32"`` or ``"bf16"`` on the tensor cores at that rate. ``graph=True``:
    replayed from a CUDA graph, so nothing is issued from the host."""
    def size(v: int) -> int:                # bytes of an array (two an element when stored as bfloat16)
        return p.types[v].size * (2 if v in pl.narrow else itemsize(p.types[v]))
    nbytes = sum(size(v) for v in dict.fromkeys(pl.read(x)[0] for x in step.inputs))
    nbytes += sum(size(v) for v in step.outputs)
    ws = [_work(p, a) for a in step.work]
    mm = sum(w.matmul_flops for w in ws)
    other = sum(w.flops for w in ws) - mm
    dt = p.types[step.instrs[0].results[0]].dtype if step.instrs and step.instrs[0].results else None
    # float32 products on the tensor cores: cuBLAS's under tf32 and bf16, and the attention kernels' that have
    # ``mma`` (bf16 or TF32 instructions, three a product under 3xtf32); other attention kernels' on the CUDA cores
    mma = step.instrs[0].op.mma if step.kind == "attention" else ""
    on_tc = mm if mma or (precision != "fp32" and isinstance(dt, Float) and dt.bits == 32
                          and step.kind == "matmul") else 0
    simt_rate = dev.fp64_flops if isinstance(dt, Float) and dt.bits == 64 else dev.fp32_flops
    unit = mma or ("bf16" if precision == "bf16" else "tf32")      # the tensor cores' instructions
    tc_rate = (dev.bf16_flops if unit == "bf16" else dev.tf32_flops) / (3 if unit == "3xtf32" else 1)
    compute = on_tc / tc_rate + (mm - on_tc + other) / simt_rate
    roofline = max(nbytes / dev.hbm_bytes_s, compute)
    issue = 0.0 if graph else ISSUE_S["matmul"] if step.kind == "matmul" else ISSUE_S["kernel"]
    return {"kernels": 1, "flops": mm + other, "matmul_flops": mm, "tensor_core_flops": on_tc,
            "cuda_core_flops": mm - on_tc + other, "bytes": nbytes,
            "seconds": max(issue, dev.launch_s + roofline), "roofline_s": roofline}


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _work(p: Any, a: Any) -> Work:
    """The work of an instruction: the streaming attention kernels' own count (:func:`.attention.costs`), none
    for a rounding."""
    rd = sum(p.types[x].size * itemsize(p.types[x]) for x in a.args)
    wr = sum(p.types[r].size * itemsize(p.types[r]) for r in a.results)
    if isinstance(a.op, attention.OPS):
        return Work(*attention.costs(a.op), rd, wr)
    if isinstance(a.op, RoundBF16):             # a product's operand rounded (:mod:`.rounding`): no arithmetic
        return Work(0, 0, 0, rd, wr)
    return work(p, a)


def _float32(p: Any) -> bool:
    """Whether ``p`` computes in float32 (the only dtype ``precision`` changes)."""
    return any(isinstance(t.dtype, Float) and t.dtype.bits == 32 for t in p.types)


def _function(f: Any, p: Any, function: str, precision: str = "fp32") -> Any:
    """The GPU function of ``p`` as the backend builds it at ``precision`` (its plan, its glue, the values it
    stores as bfloat16): the compiled model's own when it was compiled so, else built here (donating the step's
    inputs, as ``donate=True``)."""
    fn = getattr(f, "_fns", {}).get(function) if hasattr(f, "fn") else None
    compiled = getattr(fn, "compiled", None)
    if isinstance(compiled, GpuFunction) and compiled.precision == precision:     # compiled for the GPU so
        return compiled
    names = list(getattr(f, "arg_names", {}).get(function, [])) or [f"a{k}" for k in range(len(p.inputs))]
    pairs = (compiled.donate_pairs if isinstance(compiled, GpuFunction) else
             dict(zip(p.outputs, p.inputs)) if function == "step" and getattr(f, "donate", True) else None)
    return build(p, names, function, np, emulated_kernel, pairs, precision)


def estimate(f: Any, device: str | None = None, function: str = "step", depth: int = 2, tf32: bool = False,
             graph: bool | None = None, precision: str | None = None):
    """The cost of ``f``'s ``function`` on ``device``. ``precision`` (``"fp32"``, ``"tf32"``, ``"bf16"``) and
    ``graph`` default to the compiled model's own (``tf32=True`` is ``precision="tf32"``)."""
    precision = precision or ("tf32" if tf32 else getattr(f, "precision", "fp32"))
    if precision not in ("fp32", "tf32", "bf16"):
        raise ValueError(f"cost: precision must be 'fp32', 'tf32' or 'bf16', got {precision!r}")
    graph = bool(getattr(f, "graph", False)) if graph is None else graph
    tf32 = precision != "fp32"
    key = (device or "h100").lower()
    if key not in DEVICES:
        raise ValueError(f"cost: unknown GPU device {device!r}; choose one of {', '.join(DEVICES)}")
    dev = DEVICES[key]
    p = program_of(f, function)
    fixed = any(isinstance(t.dtype, Fixed) for t in p.types)
    # kernels exist in float32/float64 only; bf16 changes what the plan stores
    g = None if fixed else _function(f, p, function, precision if _float32(p) else "fp32")
    pl = g.plan if g is not None else plan(p)
    p = pl.program                                        # the program the backend runs (attention fused)
    lines = []
    for step in pl.steps:
        if step.kind not in ("view", "const"):
            c = launch_cost(p, pl, step, dev, precision, graph)
            c.pop("roofline_s")
            lines.append((step.instrs[0].path if step.instrs else "", c))
    launches = len(lines)
    rows, total = table(lines, depth)
    peak = memory.peak(g) if g is not None else None
    issue = ("one CUDA graph replay: nothing issued from the host per launch" if graph else
             f"each launch issued from Python in {ISSUE_S['kernel'] * 1e6:.0f} µs (a generated kernel) or "
             f"{ISSUE_S['matmul'] * 1e6:.0f} µs (cuBLAS), measured")
    notes = [f"{dev.name}: HBM {dev.hbm_bytes_s / 1e12:.2f} TB/s, FP32 {dev.fp32_flops / 1e12:.0f} TFLOPS, "
             f"tensor cores {dev.tf32_flops / 1e12:.1f} TFLOPS TF32, {dev.bf16_flops / 1e12:.1f} bf16 "
             f"({'float32 products in ' + precision if tf32 else 'not used: precision fp32'}), "
             f"{issue}; {dev.launch_s * 1e6:.0f} µs kernel start on the device (assumed)",
             f"{launches} launches per {p.name}; bytes are HBM reads and writes of the fused-kernel plan",
             f"peak device memory {_size(peak)}: arguments, constants and intermediates at the step's "
             f"peak (gpu.memory.peak)" if peak is not None else
             "no peak memory: the GPU backend runs float32/float64 programs, this one is in fixed point"]
    return Cost("gpu", dev.name, p.name, rows, total, notes,
                {"device": dev, "launches": launches, "plan": pl, "peak_bytes": peak})
