"""Generated CUDA kernels, checked without a GPU: nvcc compiles every kernel (device code), and
the same element bodies compiled for the host compute what NumPy computes."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends.gpu import cuda, runtime
from circuitgrad.backends.gpu.host import check as hostcheck
from circuitgrad.backends.gpu import plan as make_plan
from _tolerance import assert_within, kernel_instrs, local_error_bounds
from conftest import all_values

pytestmark = pytest.mark.skipif(hostcheck.nvcc() is None, reason="nvcc not installed")

MODELS = [
    ("mlp-relu-sce", lambda B, dt: nn.mlp(B, [6, 16, 4], dtype=dt), nn.softmax_cross_entropy, nn.sgd(0.1)),
    ("mlp-sigmoid-momentum", lambda B, dt: nn.mlp(B, [5, 8, 3], activation=nn.sigmoid, dtype=dt), nn.mse,
     nn.momentum(0.1)),
    ("tanh-softmax", lambda B, dt: nn.mlp(B, [4, 7, 3], activation=nn.tanh, dtype=dt) >> nn.softmax(B, 3, dtype=dt),
     nn.mse, nn.sgd(0.05)),
]


@pytest.mark.parametrize("dtype", [cg.float32, cg.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,make,loss,opt", MODELS, ids=[m[0] for m in MODELS])
def test_kernels_compile_and_match_numpy_on_the_host(name, make, loss, opt, dtype, rng):
    B = 5
    step = cg.compile_model(make(B, dtype), loss=loss, optimizer=opt, dtype=dtype)
    for key in ("step", "predict"):
        prog = step.fn(key).program
        p = make_plan(prog)
        ks = runtime.kernels(p, prefix=f"k_{key}")
        assert ks, "every model has at least one fused kernel"
        host = hostcheck.compile_host(list(ks.values()), cuda.ctype(prog.types[prog.inputs[0]]))
        npdt = dtype.numpy_dtype()
        inputs = [rng.normal(size=prog.types[v].shape).astype(npdt) for v in prog.inputs]
        env = all_values(prog, inputs)
        for i, k in ks.items():
            ins = [np.ascontiguousarray(env[p.src(v)], dtype=npdt) for v in k.inputs]
            outs = [np.zeros(prog.types[v].shape, dtype=npdt) for v in k.outputs]
            host(k.name, *ins, *outs)
            # the kernel's own instructions, from exact inputs: C's libm and NumPy's, each within its bound
            bounds = local_error_bounds(prog, kernel_instrs(prog, p.steps[i]), env, k.outputs)
            assert_within(outs, [env[v] for v in k.outputs], bounds, err_msg=f"{k.name} ({' + '.join(k.ops)})")


def test_broadcast_index_arithmetic():
    assert cuda.broadcast_index((16,), (8, 16)) == "(i % 16LL)"
    assert cuda.broadcast_index((8, 1), (8, 16)) == "((i / 16LL) % 8LL)"
    assert cuda.broadcast_index((), (8, 16)) == "0"
    assert cuda.broadcast_index((8, 16), (8, 16)) == "i"
    assert cuda.broadcast_index((3, 1, 4), (2, 3, 5, 4)) == "(i % 4LL) + ((i / 20LL) % 3LL) * 4LL"
