"""The GPU backend's modules compiled by NVRTC, the compiler a device runs (``cupy.RawModule``), here without a
device: every kernel of a GPT's step, predict and loss in each precision and norm, as the backend assembles them
(:func:`~circuitgrad.backends.gpu.module.split`), for sm_90. nvcc (the other tests) compiles with a host
compiler's headers beside it; NVRTC has none, so what only nvcc takes would otherwise first fail on a device."""
from __future__ import annotations

import _attention
import pytest
from _nvrtc import compile_source, load
from test_gpu_hostrun import MODELS as HOSTRUN_MODELS

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import attention, module

lib, why = load()
pytestmark = pytest.mark.skipif(lib is None, reason=why)

KERNEL = 'extern "C" __global__ void k(float* y, const float* x) { y[threadIdx.x] = %s; }\n'


def test_nvrtc_compiles_a_kernel_and_refuses_a_host_header():
    """The check can fail: NVRTC has no C library headers (nvcc would take this source), and its log says so."""
    good = compile_source(KERNEL % "expf(x[threadIdx.x])")
    assert good.ok and set(good.registers) == {"k"} and good.spill_bytes == {"k": 0}, good.log
    bad = compile_source("#include <string.h>\n" + KERNEL % "x[0]")
    assert not bad.ok and "string.h" in bad.log


def test_a_compile_error_is_in_the_log():
    bad = compile_source(KERNEL % "undefined_function(x[0])")
    assert not bad.ok and 'identifier "undefined_function" is undefined' in bad.log


def test_registers_are_the_kernels_and_spills_every_function():
    """ptxas reports a function that is not inlined (``__noinline__``; double ``sin``'s slow path) as well: its
    spills count, its registers are its kernel's."""
    out = compile_source("__device__ __noinline__ float helper(float x) { return 2 * x; }\n"
                         'extern "C" __global__ void k1(float* y) { y[threadIdx.x] = helper(y[0]); }\n'
                         'extern "C" __global__ void k2(double* y) { y[threadIdx.x] = sin(y[1]); }\n')
    assert out.ok and set(out.registers) == {"k1", "k2"}, out.log
    assert {"k1", "k2", "_Z6helperf"} <= set(out.spill_bytes) and not any(out.spill_bytes.values())


def _compiles(step) -> int:
    """Each function's modules compiled by NVRTC for sm_90 with no error and no spill; the kernels' count."""
    kernels = 0
    for key in ("step", "predict", "loss"):
        f = step.fn(key).compiled
        codes, where = module.split(f.kernels)
        kernels += len(f.kernels)
        compiled = set()
        for code in codes:
            out = compile_source(code)
            assert out.ok, f"{key}: {out.log[-3000:]}"
            assert out.spill_bytes and not any(out.spill_bytes.values()), (key, out.spill_bytes)
            assert out.registers and set(out.registers) <= set(out.spill_bytes)
            compiled |= set(out.registers)
        # every kernel a launch names was in a module NVRTC compiled (and reported on)
        assert {name for _, name in where.values()} <= compiled
    return kernels


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["softmax", "spherical"])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_every_kernel_of_a_gpt_compiles_for_sm90_without_spills(precision, norm):
    """A GPT with 64-wide heads (the real models' ``dh``: streaming attention on quads under fp32, on the tensor
    cores under tf32 and bf16, q, k, v stored as bfloat16 under bf16), its step (donated), predict and loss."""
    step = cg.compile_model(nn.gpt(2, 64, 13, d=128, heads=2, layers=1, attention=norm),
                            loss=nn.softmax_cross_entropy, optimizer=nn.adamw(1e-3), backend="cupy-emulated",
                            donate=True, precision=precision)
    for key in ("step", "predict", "loss"):
        assert any(s.kind == "attention" for s in step.fn(key).compiled.plan.steps)
    kernels = _compiles(step)
    assert kernels > 20


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [cg.float32, cg.float64])
@pytest.mark.parametrize("name", list(HOSTRUN_MODELS))
def test_every_kernel_of_the_host_mode_models_compiles(name, dtype):
    """The models the host execution mode checks against NumPy (an MLP, a layer norm, a CNN's gathers, attention
    a thread per row, small GPTs), in float32 and float64 (``double`` kernels)."""
    make, loss, _ = HOSTRUN_MODELS[name]
    step = cg.compile_model(make(), loss=loss, optimizer=nn.momentum(0.05), dtype=dtype, backend="cupy-emulated",
                            donate=True)
    assert _compiles(step) > 3


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["softmax", "spherical"])
def test_the_attention_benchmarks_other_kernels_compile(kind):
    """What ``bench/gpu_attention.py`` runs beyond a GPT's kernels, at its shape's ``dh = 64``: 3xTF32 (opt-in),
    and dk and dv apart (a thread per row under fp32, whose dk spills, as nvcc's ptxas says too; see
    ``tests/test_gpu_attention_mma.py`` for 3xTF32's bound)."""
    T = cg.NdArrayType((1, 2, 64, 64), cg.float32)
    prog = _attention.step(kind, T)
    cases = [("fp32", True, prog)] + [(p, False, attention.fuse(prog, p, together=False))
                                       for p in ("fp32", "tf32", "bf16")]
    for precision, three, p in cases:
        f = gpu.compile_function(p, ["q", "k", "v", "do"], "f", emulate=True, precision=precision,
                                 attention_3xtf32=three)
        cores = [x.op for x in f.program.instrs if isinstance(x.op, attention.OPS)]
        assert [type(c).__name__ for c in cores] == ["AttentionForward", "AttentionGradQ", "AttentionGradV",
                                                     "AttentionGradK"]
        assert {c.mma for c in cores} == {"3xtf32" if three else attention.tensor_cores(T, precision)}
        for code in module.split(f.kernels)[0]:
            out = compile_source(code)
            assert out.ok, f"{precision}: {out.log[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_unrolled_tensor_core_kernels_compile_without_spills(precision, monkeypatch):
    """``attention_mma.UNROLL = 2`` (``bench/gpu_attention.py``'s unrolled rows), at dh = 64: each loop over the
    other side's steps carries ``#pragma unroll 2`` on the device only, and NVRTC compiles the forward, dq and
    dk-dv kernels for sm_90 without spills."""
    from circuitgrad.backends.gpu import attention_mma
    monkeypatch.setattr(attention_mma, "UNROLL", 2)
    T = cg.NdArrayType((1, 2, 64, 64), cg.float32)
    for cls in (attention.AttentionForward, attention.AttentionGradQ, attention.AttentionGradKV):
        src, _, _ = attention_mma.source(cls(T, True, 0.125, mma=precision), "k")
        loops = src.count("for (long long jt = ") + src.count("for (long long it = ")
        assert loops and src.count("#ifdef __CUDA_ARCH__\n#pragma unroll 2\n#endif\n    for (long long ") == loops
        out = compile_source(src)
        assert out.ok and out.spill_bytes and not any(out.spill_bytes.values()), (cls.__name__, out.log[-2000:])
