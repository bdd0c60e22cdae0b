"""The cost model: exact ZK constraints and FPGA cycles, FLOPs equal to PyTorch's counter, plan traffic."""
import dataclasses
import math
import os
import re
import sys

import numpy as np
import pytest
import _peers

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import fpga, zk
from circuitgrad.costmodel import cpu as cost_cpu
from circuitgrad.backends.gpu import cost as costmodel_gpu

FX = cg.fixed(16, 8)


def mlp():
    return nn.mlp(8, [4, 16, 3])


def cnn(B=4):
    return cg.sequential([nn.conv2d(B, 1, 8, 8, 4, kernel=3, padding=1), nn.relu(B, 4, 8, 8),
                          nn.max_pool2d(B, 4, 8, 8, 2), nn.flatten(B, 4, 4, 4), nn.dense(B, 64, 10)])


def gpt(kind="softmax"):
    return nn.gpt(2, 4, 8, d=8, heads=2, layers=2, attention=kind)


MODELS = {"mlp": (mlp, nn.sgd(0.125)), "cnn": (cnn, nn.momentum(0.125, 0.5)), "gpt": (gpt, nn.sgd(0.125))}


def compiled(name, dtype=cg.float32):
    make, opt = MODELS[name]
    return cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=opt, dtype=dtype)


# ------------------------------------------------------------------ exact counts
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zk_constraints_equal_the_compiled_circuit(name):
    step = compiled(name, FX)
    c = cg.cost(step, "zk", prover_time=False)
    circuit = zk.compile(step, field=zk.LIGERO51)
    assert c.constraints == circuit.r1cs.n_constraints
    assert c.lookups == circuit.r1cs.n_lookups
    assert sum(r.constraints for r in c.rows) == c.constraints
    # the gadget breakdown is the circuit's own
    by = c.detail["by_gadget"]
    assert {k: v["constraints"] for k, v in by.items() if v["constraints"]} == circuit.r1cs.counts_by_gadget()


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("macs", [1, 4])
def test_fpga_cycles_equal_the_design(name, macs):
    step = compiled(name, FX)
    c = cg.cost(step, "fpga", macs=macs)
    d = fpga.compile(step, macs=macs)
    assert c.cycles == d.cycles
    assert c.total.words == d.microcode.depth
    assert sum(r.cycles for r in c.rows) == c.cycles


def test_rows_name_the_definitions():
    c = cg.cost(compiled("gpt", FX), "zk", prover_time=False)
    names = [r.name for r in c.rows]
    assert {"gpt/block0", "gpt/block1", "gpt/embedding", "gpt/head", "sgd", "softmax_cross_entropy"} <= set(names)
    deeper = cg.cost(compiled("gpt", FX), "zk", prover_time=False, depth=4)
    assert "gpt/block1/attention/causal_softmax_attention" in [r.name for r in deeper.rows]
    assert deeper.constraints == c.constraints


# ------------------------------------------------------------------ FLOPs against PyTorch
torch_tests = pytest.mark.torch


def _torch_flops(fn):
    torch = _peers.torch()
    from torch.utils.flop_counter import FlopCounterMode
    from torch.nn.attention import SDPBackend, sdpa_kernel
    # the math backend: FlopCounterMode does not count the CPU flash kernel's products
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn(torch).backward()
    return fc.get_total_flops()


@torch_tests
@pytest.mark.parametrize("name", sorted(MODELS))
def test_matmul_flops_equal_pytorch_flop_counter(name):
    step = compiled(name, cg.float64)
    params = step.init_params(seed=0)

    def forward_backward(torch):
        import torch.nn.functional as F
        p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        if name == "mlp":
            x = torch.randn(8, 4, dtype=torch.float64)
            h = torch.relu(x @ p["W0"] + p["b0"])
            logits, y = h @ p["W1"] + p["b1"], torch.randint(0, 3, (8,))
        elif name == "cnn":
            x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
            h = F.max_pool2d(torch.relu(F.conv2d(x, p["W0"], padding=1) + p["b0"]), 2)
            logits, y = h.reshape(4, 64) @ p["W1"] + p["b1"], torch.randint(0, 10, (4,))
        else:
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "peers"))
            import torch_gpt
            ids = torch.randint(0, 8, (2, 4))
            logits, y = torch_gpt.gpt(ids, p, 2, 2, "softmax").reshape(-1, 8), torch.randint(0, 8, (8,))
        return F.cross_entropy(logits, y)
    assert cg.cost(step, "cpu").matmul_flops == _torch_flops(forward_backward)


# ------------------------------------------------------------------ GPU plan traffic, by hand
def test_gpu_traffic_of_one_fused_kernel_and_one_product():
    T = cg.NdArrayType((1000,), cg.float32)
    f = cg.trace(lambda x: ops.tanh(x) * x + x, [T], name="f")
    c = cg.cost(f, "gpu", device="h100")
    assert c.total.kernels == 1
    assert c.bytes == 2 * 4000                     # x read once, the result written once
    assert c.flops == 3 * 1000 and c.matmul_flops == 0
    A, B = cg.NdArrayType((64, 32), cg.float32), cg.NdArrayType((32, 16), cg.float32)
    g = cg.trace(lambda a, b: a @ b, [A, B], name="g")
    c = cg.cost(g, "gpu", device="h200")
    assert c.matmul_flops == 2 * 64 * 32 * 16
    assert c.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
    dev = c.detail["device"]
    issue = costmodel_gpu.ISSUE_S["matmul"]             # a small product waits on the host's cuBLAS call
    assert c.seconds == pytest.approx(max(issue, dev.launch_s + max(c.bytes / dev.hbm_bytes_s,
                                                                   c.flops / dev.fp32_flops)))
    assert c.seconds == issue
    N = cg.NdArrayType((2048, 2048), cg.float32)
    big = cg.cost(cg.trace(lambda a, b: a @ b, [N, N], name="big"), "gpu", device="h100")
    assert big.seconds == pytest.approx(dev.launch_s + 2 * 2048 ** 3 / dev.fp32_flops)   # the device's work
    assert big.seconds > costmodel_gpu.ISSUE_S["matmul"]
    tc = cg.cost(g, "gpu", device="h100", tf32=True)
    assert tc.total.tensor_core_flops == 2 * 64 * 32 * 16 and tc.total.cuda_core_flops == 0
    bf = cg.cost(cg.trace(lambda a, b: a @ b, [N, N], name="big"), "gpu", device="h100", precision="bf16")
    # both operands rounded to bfloat16 by one kernel (gpu.rounding: four bytes read, two written an element), then
    # the product reads two bytes an element and writes four
    rounding, product = 2 * (4 + 2) * 2048 ** 2, (2 + 2 + 4) * 2048 ** 2
    assert bf.total.kernels == 2 and bf.bytes == rounding + product
    h100 = bf.detail["device"]
    rounding_s = max(costmodel_gpu.ISSUE_S["kernel"], h100.launch_s + rounding / h100.hbm_bytes_s)
    device_s = h100.launch_s + max(product / h100.hbm_bytes_s, 2 * 2048 ** 3 / h100.bf16_flops)
    assert bf.seconds == pytest.approx(rounding_s + max(issue, device_s)) and bf.total.tensor_core_flops == 2 * 2048 ** 3
    with pytest.raises(ValueError) as e:
        cg.cost(g, "gpu", precision="fp16")
    assert str(e.value) == "cost: precision must be 'fp32', 'tf32' or 'bf16', got 'fp16'"


def test_gpu_cost_takes_the_compiled_models_precision_and_graph():
    step = cg.compile_model(nn.mlp(64, [256, 256, 10]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1),
                            backend="cupy-emulated", donate=True, precision="bf16")
    own, fp32 = cg.cost(step, "gpu"), cg.cost(step, "gpu", precision="fp32")
    assert own.total.tensor_core_flops == fp32.total.matmul_flops > 0 and fp32.total.tensor_core_flops == 0
    assert "float32 products in bf16" in own.notes[0]


@pytest.mark.parametrize("precision", ["bf16", "tf32", "fp32", "3xtf32"])
@pytest.mark.parametrize("seq, whole", [(12, False), (16, True)])
def test_gpu_streaming_attention_products_are_costed_where_they_run(seq, whole, precision):
    """Under ``precision="bf16"`` cuBLAS's products run on the tensor cores at the bf16 rate (under fp32 on the
    CUDA cores); the streaming attention kernels' do when their rows fill whole tiles (``S`` a multiple of 16) and
    the precision asks (bf16 instructions under bf16; fp32 with ``attention_3xtf32``: TF32 instructions, three a
    product), the scores computed twice in the 3xTF32 forward (two passes; tf32 and bf16 take one); else on the
    CUDA cores (a quad or a thread per row)."""
    from circuitgrad.backends.gpu import attention
    from circuitgrad.backends.gpu import cost as gpu_cost
    from circuitgrad.backends.gpu.host.emulate import emulated_kernel
    from circuitgrad.backends.gpu.runtime import build
    step = cg.compile_model(nn.gpt(2, seq, 11, d=32, heads=2, layers=1), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.1))
    prog = step.programs["step"]
    real = "fp32" if precision == "3xtf32" else precision
    f = build(prog, [f"a{i}" for i in range(len(prog.inputs))], "step", np, emulated_kernel, None, real,
              attention_3xtf32=precision == "3xtf32")
    pl, dev = f.plan, gpu_cost.DEVICES["h100"]
    tensor_cores = whole and precision != "fp32"
    att = [s for s in pl.steps if s.kind == "attention"]
    together = whole and precision != "3xtf32"          # dk and dv in one kernel (S = 16: a quad a row, or tiles)
    assert len(att) == (3 if together else 4) and all(bool(s.instrs[0].op.mma) == tensor_cores for s in att)
    for s in att + [s for s in pl.steps if s.kind == "matmul"]:
        c = gpu_cost.launch_cost(pl.program, pl, s, dev, real)
        on_tc = (s.kind == "matmul" and real != "fp32") or (s.kind == "attention" and tensor_cores)
        assert c["matmul_flops"] > 0 and c["tensor_core_flops"] == (c["matmul_flops"] if on_tc else 0)
        assert c["cuda_core_flops"] == c["flops"] - c["tensor_core_flops"]
    fwd = next(s for s in att if isinstance(s.instrs[0].op, attention.AttentionForward))
    c = gpu_cost.launch_cost(pl.program, pl, fwd, dev, real)
    pairs = 2 * 2 * seq * seq * 0.5                     # B·H·S²/2: the causal pairs costs() counts
    assert c["matmul_flops"] == pairs * 2 * 16 * (3 if tensor_cores and precision == "3xtf32" else 2)
    for s in att:                                       # dk and dv together: s, dp, dSᵀq and Aᵀ dO, four products
        if isinstance(s.instrs[0].op, attention.AttentionGradKV):
            assert gpu_cost.launch_cost(pl.program, pl, s, dev, real)["matmul_flops"] == pairs * 2 * 16 * 4
    if tensor_cores:                                    # the products' time at the bf16 rate, or three at TF32's
        dev = dataclasses.replace(dev, hbm_bytes_s=1e30, launch_s=0.0, fp32_flops=1e30)
        c = gpu_cost.launch_cost(pl.program, pl, fwd, dev, real)
        rate = {"bf16": dev.bf16_flops, "tf32": dev.tf32_flops, "3xtf32": dev.tf32_flops / 3}[precision]
        assert c["roofline_s"] == pytest.approx(c["matmul_flops"] / rate)
    mm = next(s for s in pl.steps if s.kind == "matmul")         # cuBLAS's products: at the precision's rate
    c = gpu_cost.launch_cost(pl.program, pl, mm, dataclasses.replace(dev, hbm_bytes_s=1e30, launch_s=0.0), real)
    rate = {"bf16": dev.bf16_flops, "tf32": dev.tf32_flops}.get(real, dev.fp32_flops)
    assert c["roofline_s"] == pytest.approx(c["flops"] / rate if real == "fp32" else c["matmul_flops"] / rate
                                            + (c["flops"] - c["matmul_flops"]) / dev.fp32_flops)


def test_gpu_launches_equal_the_backend_plan():
    from circuitgrad.backends.gpu import attention
    from circuitgrad.backends.gpu.plan import plan
    step = compiled("gpt")
    c = cg.cost(step, "gpu")
    assert c.total.kernels == c.detail["launches"] == plan(attention.fuse(step.programs["step"])).launches


# ------------------------------------------------------------------ CPU roofline
def test_cpu_roofline_from_a_given_calibration():
    cal = cost_cpu.Calibration(gemm_flops=(1e9,) * 6, stream_bytes=(1e10,) * 5, exp_per_s=1e9, call_s=1e-6,
                               machine="test", blas="numpy")
    A, B = cg.NdArrayType((64, 32), cg.float32), cg.NdArrayType((32, 16), cg.float32)
    g = cg.trace(lambda a, b: ops.exp(a @ b), [A, B], name="g")
    c = cg.cost(g, "cpu", calibration=cal)
    mm, ex = 2 * 64 * 32 * 16, 64 * 16
    mm_bytes = 4 * (64 * 32 + 32 * 16 + 64 * 16)
    expect = (1e-6 + max(mm / 1e9, mm_bytes / 1e10)) + (1e-6 + 2 * 4 * ex / 1e10 + ex / 1e9)
    assert c.seconds == pytest.approx(expect)
    assert c.flops == mm + ex and c.matmul_flops == mm


def test_cpu_calibration_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path))
    a = cost_cpu.calibrate()
    assert os.path.exists(tmp_path / "cpu-calibration.json")
    assert all(r > 0 for r in a.gemm_flops + a.stream_bytes) and a.call_s > 0
    assert cost_cpu.calibrate() == a                       # read back, not measured again
    (tmp_path / "cpu-calibration.json").write_text("{not json")
    assert cost_cpu.calibrate().gemm_flops                 # a damaged cache is measured again
    import json
    bad = json.loads((tmp_path / "cpu-calibration.json").read_text())
    for field, value in (("gemm_flops", [1.0]), ("stream_bytes", [-1.0] * 5), ("call_s", "nan"), ("exp_per_s", None),
                         ("context", [-1.0] * 4), ("context_kinds", [6, 2, 14, 27]),
                         ("entry", [1e-5]), ("entry", [1e-5, "inf"])):
        (tmp_path / "cpu-calibration.json").write_text(json.dumps({**bad, field: value}))
        c = cost_cpu.calibrate()                           # a malformed field: measured again, never used
        assert len(c.gemm_flops) == 6 and min(c.stream_bytes) > 0 and c.call_s > 0 and c.exp_per_s > 0
        assert min(c.context) >= 1 and len(c.entry) == 2 and min(c.entry) >= 0


def test_prover_calibration_cache_is_validated(tmp_path, monkeypatch):
    import json
    from circuitgrad.backends.zk import cost as cost_zk
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(cost_zk, "_calibration_circuit", lambda *a: calls.append(a) or cost_zk._synthetic(64))
    rates = cost_zk.calibrate_prover()
    assert len(rates) == len(cost_zk.PROVER_FEATURES) and all(r >= 0 for r in rates)
    n = len(calls)
    assert cost_zk.calibrate_prover() == rates and len(calls) == n      # cached
    path = tmp_path / "ligero-calibration.json"
    good = json.loads(path.read_text())
    nf = len(cost_zk.PROVER_FEATURES)
    for value in ([1.0, 2.0], [-1.0] * nf, ["inf"] * nf, "x"):
        path.write_text(json.dumps({**good, "seconds_per": value}))
        again = cost_zk.calibrate_prover()
        assert len(again) == nf and all(np.isfinite(r) and r >= 0 for r in again)
    assert len(calls) == 5 * n                                           # each malformed cache re-measured


def test_table_lists_rows_and_total():
    s = str(cg.cost(compiled("mlp"), "gpu"))
    assert re.search(r"^mlp/dense0 ", s, re.M) and re.search(r"^total ", s, re.M)
    assert "launches per step" in s


# ------------------------------------------------------------------ bad requests
def test_bad_requests_raise_clear_errors():
    step = compiled("mlp")
    with pytest.raises(ValueError, match=re.escape("cost: target must be one of cpu, gpu, fpga, zk, got 'tpu'")):
        cg.cost(step, "tpu")
    with pytest.raises(ValueError, match=re.escape("cost: unknown GPU device 'a100'; choose one of h100, h200")):
        cg.cost(step, "gpu", device="a100")
    with pytest.raises(TypeError, match=re.escape("cost: the zk target needs a compiled model (cg.compile_model), "
                                                  "got Diagram")):
        cg.cost(mlp(), "zk")
    with pytest.raises(TypeError, match=re.escape("cost: expected a compiled model (cg.compile_model), a Diagram "
                                                  "or a Program, got int")):
        cg.cost(3, "cpu")
    with pytest.raises(ValueError, match=re.escape("cost: unknown function 'train'; choose one of ['gradients', "
                                                   "'loss', 'predict', 'step']")):
        cg.cost(step, "cpu", function="train")
    with pytest.raises(AttributeError, match=re.escape("cost: cycles does not apply to target 'gpu'")):
        cg.cost(step, "gpu").cycles
    np.testing.assert_equal(cg.cost(step, "gpu").total.kernels > 0, True)


# ------------------------------------------------------------------ FPGA resources against synthesis
def test_fpga_resource_estimate_has_dsp_and_bram_rules():
    step = compiled("mlp", FX)
    c1 = cg.cost(step, "fpga", device="ecp5-85k", macs=1)
    c4 = cg.cost(step, "fpga", device="ecp5-85k", macs=4)
    # each lane's multiplier and the exp unit's three (on lane 0), as bench/fpga.py's synthesis counts them (iris
    # step: 4 DSPs at one lane, 7 at four); 702 words: two copies of one block, or 4 interleaved banks of 176, two each
    assert (c1.total.dsp, c4.total.dsp) == (4, 7)
    assert (c1.total.bram, c4.total.bram) == (2, 8)
    with pytest.raises(ValueError, match=re.escape("cost: unknown FPGA device 'xc7a35t'; choose an ecp5-… or "
                                                   "ice40-… target (ecp5-85k, ice40-up5k)")):
        cg.cost(step, "fpga", device="xc7a35t")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ecp5-85k", "ice40-up5k"])
def test_fpga_resource_estimate_against_synthesis(target, tmp_path):
    """A design the fit never saw (the iris predict at batch 8): LUT4 within 20 %, DSPs and BRAMs exact."""
    from circuitgrad.backends.fpga.synth import cell_counts
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=FX)
    c = cg.cost(step, "fpga", device=target, function="predict")
    cells = cell_counts(fpga.compile(step, function="predict"), target, str(tmp_path), log=lambda *a: None)
    lut = cells.get("LUT4", 0) + cells.get("SB_LUT4", 0)
    assert abs(c.lut4 / lut - 1) <= 0.20, (c.lut4, lut)
    assert c.total.dsp == cells.get("MULT18X18D", 0) + cells.get("SB_MAC16", 0)
    assert c.total.bram == cells.get("DP16KD", 0) + cells.get("SB_RAM40_4K", 0)


# ------------------------------------------------------------------ the unrolled FPGA predict
def _unrolled(sizes=(4, 6, 3), seed=11):
    step = cg.compile_model(nn.mlp(1, list(sizes)), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=FX)
    return step, step.init_params(seed=seed)


def test_fpga_unrolled_cost_is_the_pipeline(monkeypatch):
    from circuitgrad.backends.fpga import cost as fpga_cost
    from circuitgrad.backends.fpga.cost import unrolled_features, unrolled_fmax, unrolled_resources
    step, p = _unrolled()
    texts, elaborate = [], fpga_cost.rtlil_text
    with monkeypatch.context() as m:        # the LUT and both clock estimates read one elaboration
        m.setattr(fpga_cost, "rtlil_text", lambda *a, **k: texts.append(elaborate(*a, **k)) or texts[-1])
        c = cg.cost(step, "fpga", device="ice40-up5k", function="predict", unroll=p)
    assert len(texts) == 1
    d = fpga.unroll(step, p)
    assert c.lut4 == unrolled_resources(d, "ice40-up5k")["lut4"]      # … the same figures as elaborating each time
    assert c.cycles == d.latency == len(d.microcode.ops) + 1
    assert (c.total.dsp, c.total.bram) == (0, 0)
    assert [r.name for r in c.rows][0] == "(input register)"
    # zero weights vanish from the netlist: fewer adder bits, fewer LUTs
    zero = {k: np.zeros_like(np.asarray(v)) if np.asarray(v).ndim == 2 else v for k, v in p.items()}
    z = cg.cost(step, "fpga", device="ice40-up5k", function="predict", unroll=zero)
    assert sum(unrolled_features(fpga.unroll(step, zero))) < sum(unrolled_features(d))
    assert z.lut4 < c.lut4
    # … and a shorter path: no adder at all still has a finite clock, faster than the design with adders
    assert math.isfinite(unrolled_fmax(fpga.unroll(step, zero), "ice40-up5k"))
    assert unrolled_fmax(fpga.unroll(step, zero), "ice40-up5k") > unrolled_fmax(d, "ice40-up5k")
    with pytest.raises(ValueError, match=re.escape("cost: the unrolled FPGA design runs predict only; pass "
                                                   "function='predict' (got 'step')")):
        cg.cost(step, "fpga", unroll=p)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ecp5-85k", "ice40-up5k"])
def test_fpga_unrolled_estimate_against_synthesis(target, tmp_path):
    """An unrolled MLP the fit never saw (4-6-3, seed 11): LUT4 within 20 %, no DSP or block RAM."""
    from circuitgrad.backends.fpga.synth import cell_counts
    step, p = _unrolled()
    c = cg.cost(step, "fpga", device=target, function="predict", unroll=p)
    cells = cell_counts(fpga.unroll(step, p), target, str(tmp_path), log=lambda *a: None)
    lut = cells.get("LUT4", 0) + cells.get("SB_LUT4", 0)
    assert abs(c.lut4 / lut - 1) <= 0.20, (c.lut4, lut)
    assert cells.get("MULT18X18D", 0) + cells.get("SB_MAC16", 0) == 0
    assert cells.get("DP16KD", 0) + cells.get("SB_RAM40_4K", 0) == 0


@pytest.mark.parametrize("device, macs, words, blocks", [
    ("ecp5-85k", 1, 80, 0), ("ecp5-85k", 1, 81, 2), ("ecp5-85k", 1, 2048, 4),
    ("ecp5-85k", 8, 8 * 80, 0), ("ecp5-85k", 8, 8 * 80 + 1, 16),          # with lanes, per interleaved bank
    ("ice40-up5k", 1, 10, 2), ("ice40-up5k", 1, 257, 4),
])
def test_block_rams_leave_memories_yosys_keeps_in_lut_ram(device, macs, words, blocks):
    from types import SimpleNamespace
    from circuitgrad.backends.fpga import cost as fpga_cost
    # the LUT-RAM rule is yosys' own (tests/test_fpga_banks.py)
    mc = SimpleNamespace(ram_words=words, dtype=SimpleNamespace(width=16), spram_blocks=0, ops=[], depth=words)
    assert fpga_cost.brams(mc, device, macs) == blocks
