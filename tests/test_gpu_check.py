"""scripts/gpu-check.sh and scripts/gpu_check.py on a machine without a device: they stop at the
device phase with one clear line and a JSON report, and the phases that need no device are checked on the
CPU (the tinygpt comparison through ``cupy-emulated``, the kernel list, NVRTC failures reported one by one)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check  # noqa: E402
from circuitgrad.backends.gpu import module  # noqa: E402

PHASES = ["device", "nvrtc", "device-tests", "tinygpt-vs-numpy", "timing"]
TINY = dict(gpu_check.CONFIG, batch=2, seq=8, d=16, heads=2, layers=1, chars=20_000)
NO_DEVICE = '''
__version__ = "13.0.0"
class CUDARuntimeError(RuntimeError):
    pass
class _Runtime:
    @staticmethod
    def getDeviceCount():
        raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
class cuda:
    runtime = _Runtime
'''


def stub_env(tmp_path, cupy_source: str) -> dict:
    (tmp_path / "stub" / "cupy").mkdir(parents=True)
    (tmp_path / "stub" / "cupy" / "__init__.py").write_text(cupy_source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "stub")] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


def check_report(path, message):
    rep = json.loads(path.read_text())
    assert rep["status"] == "no-device"
    assert rep["message"] == message
    assert [p["name"] for p in rep["phases"]] == PHASES
    assert [p["status"] for p in rep["phases"]] == ["fail"] + ["skipped"] * 4
    assert rep["phases"][0]["message"] == message.removeprefix("gpu-check: ")
    assert all(p["message"] == "no usable device (see the device phase)" for p in rep["phases"][1:])
    assert rep["elapsed_s"] < 60
    return rep


def test_without_cupy_the_check_stops_at_once_with_one_line_and_a_report(tmp_path):
    env = stub_env(tmp_path, "raise ImportError(\"No module named 'cupy'\")\n")
    report = tmp_path / "r.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--report", str(report)],
                       capture_output=True, text=True, timeout=120, env=env)
    message = ("gpu-check: CuPy is not importable (ImportError: No module named 'cupy'); "
               "install it with pip install -e '.[cuda13]' (or '.[cuda12]' for a CUDA 12 driver)")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"{message} (report: {report})"]
    assert r.stdout.splitlines()[0] == f"gpu-check: device: fail: {message.removeprefix('gpu-check: ')}"
    check_report(report, message)


def test_without_a_device_the_script_says_getdevicecount_failed(tmp_path):
    """The shell script end to end (no pip: everything it needs imports), CuPy present but no device; a relative
    report path is relative to where the script is called from."""
    env = stub_env(tmp_path, NO_DEVICE)
    env["GPU_CHECK_VENV"] = sys.prefix
    report = tmp_path / "out.json"
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), report.name], capture_output=True,
                       text=True, timeout=120, env=env, cwd=tmp_path)
    message = ("gpu-check: no CUDA device: cupy.cuda.runtime.getDeviceCount() failed (CUDARuntimeError: "
               "cudaErrorNoDevice: no CUDA-capable device is detected)")
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[-1] == f"{message} (report: {report})"
    rep = check_report(report, message)
    assert rep["phases"][0]["cupy"] == "13.0.0"


def test_with_the_benchmark_asked_the_check_still_decides_the_status(tmp_path):
    """``GPU_CHECK_BENCH=1``: the benchmarks run after the check (here they find no device and say so), and the
    exit status stays the check's."""
    env = stub_env(tmp_path, NO_DEVICE)
    env.update(GPU_CHECK_VENV=sys.prefix, GPU_CHECK_BENCH="1", GPU_BENCH_BUDGET="5")
    report = tmp_path / "out.json"
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), str(report)], capture_output=True,
                       text=True, timeout=180, env=env, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    for name in ("gpu_step", "gpu_attention"):
        assert f"\nbench/{name}.py: no GPU here (" in r.stdout + r.stderr
    for name in ("step", "attention"):
        assert json.loads((tmp_path / f"out-{name}.json").read_text())["status"] == "no-device"


def test_the_benchmarks_share_what_is_left_of_the_total(tmp_path):
    """Without ``GPU_BENCH_BUDGET`` the benchmarks get what the check left of ``GPU_CHECK_TOTAL`` seconds:
    attention a third (at least 30 s), the step benchmark the rest less 30 s (at least 60 s)."""
    env = stub_env(tmp_path, NO_DEVICE)
    env.update(GPU_CHECK_VENV=sys.prefix, GPU_CHECK_BENCH="1", GPU_CHECK_TOTAL="60")
    env.pop("GPU_BENCH_BUDGET", None)
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), str(tmp_path / "out.json")],
                       capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "gpu-check: benchmarks: step 60 s, attention 30 s" in r.stderr.splitlines()


def test_bad_arguments_are_usage_errors(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--report",
                        str(tmp_path / "missing" / "r.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (f"gpu_check.py: error: --report {tmp_path / 'missing' / 'r.json'}: "
                                         f"the directory {tmp_path / 'missing'} does not exist")


def test_tinygpt_comparison_passes_on_the_emulated_backend_with_donation():
    out = gpu_check.phase_tinygpt(TINY, backend="cupy-emulated")
    assert out["status"] == "pass", out["message"]
    assert out["donated_in_place"] == out["parameters"] > 0
    assert len(out["steps"]) == 3 and out["worst_ratio"] <= 1
    assert out["loss_device"] == pytest.approx(out["loss_numpy"], rel=1e-5)


def test_tolerance_catches_a_wrong_array_and_passes_rounding_noise():
    rng = np.random.default_rng(0)
    exact = rng.normal(size=1000)
    ref = (exact * (1 + 1e-7 * rng.normal(size=1000))).astype(np.float32)        # float32 rounding, pairwise
    noisy = (exact * (1 + 1e-6 * rng.normal(size=1000))).astype(np.float32)      # 10x worse rounding
    wrong = ref.copy()
    wrong[3] += 1e-3
    f = gpu_check.tolerance_factor(TINY)
    assert f == pytest.approx(2 * np.sqrt(16 / 4))
    ids = np.array([1, 2])
    rows = gpu_check.compare({"a": noisy, "b": wrong, "n": ids}, {"a": ref, "b": ref, "n": ids},
                             {"a": exact, "b": exact, "n": ids}, gpu_check.tolerance_factor(gpu_check.CONFIG))
    assert rows["a"]["ratio"] <= 1 < rows["b"]["ratio"]
    assert rows["n"] == {"ratio": 0.0, "exact": True}


class _CompileException(Exception):
    pass


def _distinct(ks) -> int:
    """How many kernels the backend's modules of these hold (kernels equal but for their names once)."""
    return len(set(module.source({n: k for n, (_, _, k) in enumerate(ks)})[1].values()))


def _modules(ks) -> list[int]:
    """The kernels each of the backend's modules of these holds."""
    codes, _ = module.split({n: k for n, (_, _, k) in enumerate(ks)})
    return [c.count('extern "C" __global__') for c in codes]


def _fake_nvrtc(broken: str | None, log: list, broken_in_module: str | None = None):
    """A cupy with RawKernel and RawModule that record what they compile; ``broken`` fails to compile (in a module:
    the kernel named ``broken_in_module`` there)."""
    def error(name):
        return _CompileException(f"{name}.cu(3): error: identifier \"x\" is undefined\n1 error detected")

    class RawKernel:
        def __init__(self, source, name, **kwargs):
            self.source, self.name = source, name

        def compile(self):
            if self.name == broken:
                raise error(self.name)
            log.append(("kernel", self.name))

    class RawModule:
        def __init__(self, code, **kwargs):
            self.code = code

        def compile(self):
            if broken is not None and f"void {broken_in_module}(" in self.code:
                raise error(broken)
            log.append(("module", self.code.count('extern "C" __global__')))
    class Device:                       # the current device, as module.compile_all asks for it
        def __init__(self, id=0):
            self.id = id

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False
    return types.SimpleNamespace(RawKernel=RawKernel, RawModule=RawModule, cuda=types.SimpleNamespace(Device=Device))


def test_every_tinygpt_kernel_is_listed_and_nvrtc_failures_are_reported_one_by_one(monkeypatch):
    kernels = gpu_check.tinygpt_kernels(TINY)
    assert set(kernels) == {"step", "predict", "loss"}
    names = [k.name for ks in kernels.values() for _, _, k in ks]
    assert len(names) == len(set(names)) and all(len(ks) > 0 for ks in kernels.values())
    for ks in kernels.values():
        for _, _, k in ks:
            assert f"{k.name}(" in k.source
    broken = names[len(names) // 2]
    home = next(f for f, ks in kernels.items() if any(k.name == broken for _, _, k in ks))
    kb = next(k for _, _, k in kernels[home] if k.name == broken)
    log: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_nvrtc(broken, log, module.source({0: kb})[1][0]))
    out = gpu_check.phase_nvrtc(dict(TINY, budget=60))
    modules = [c for kind, c in log if kind == "module"]     # every module of the backend's but the broken one
    codes, where = module.split({n: k for n, (_, _, k) in enumerate(kernels[home])})
    bad = next(m for n, (m, _) in where.items() if kernels[home][n][2].name == broken)
    want = [c for f, ks in kernels.items() for c in _modules(ks)]
    want.remove(codes[bad].count('extern "C" __global__'))
    assert sorted(modules) == sorted(want)
    alone = [c for kind, c in log if kind == "kernel"]
    assert sorted(alone + [broken]) == sorted(k.name for _, _, k in kernels[home])   # its function's, isolated
    assert out["status"] == "fail" and out["kernels"] == len(names) and out["compiled"] == len(names) - 1
    assert out["failed"][0]["kernel"] == broken and len(out["failed"]) == 1
    assert out["failed"][0]["log"] == [f"{broken}.cu(3): error: identifier \"x\" is undefined", "1 error detected"]
    assert out["message"] == (f"1 of {len(names)} tinygpt kernels do not compile with NVRTC; first: {broken}: "
                              f"_CompileException: {broken}.cu(3): error: identifier \"x\" is undefined")


def test_nvrtc_compiles_one_module_a_function_when_all_compile(monkeypatch):
    kernels = gpu_check.tinygpt_kernels(TINY)
    log: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_nvrtc(None, log))
    out = gpu_check.phase_nvrtc(dict(TINY, budget=60))
    assert out["status"] == "pass" and out["failed"] == [] and out["unchecked"] == []
    parts = [c for ks in kernels.values() for c in _modules(ks)]
    assert sorted(c for kind, c in log if kind == "module") == sorted(parts)
    assert all(kind == "module" for kind, _ in log)
    assert out["message"].startswith(f"all {out['kernels']} "
                                     f"tinygpt kernels compile with NVRTC ({len(parts)} modules, ")
    # no time left: the modules still decide
    log.clear()
    out = gpu_check.phase_nvrtc(dict(TINY, budget=1))
    assert out["status"] == "pass" and [kind for kind, _ in log] == ["module"] * len(parts)


def test_the_nvrtc_budget_scales_with_the_kernel_count_and_the_whole_fits(monkeypatch, tmp_path):
    """The device phase counts tinygpt's kernels; nvrtc gets 10 s + 0.25 s a kernel, the later phases their share
    of what is left, so the phases' budgets never sum past ``--budget``."""
    assert gpu_check.nvrtc_budget(155) == 48.8 and gpu_check.nvrtc_budget(400) == 110.0
    seen, clock = {}, [0.0]

    def fake_run(name, budget, cfg):                          # the worst case: every phase uses all its budget
        seen[name] = budget
        clock[0] += budget
        return {"status": "pass", "message": "", "tinygpt_kernels": 400} if name == "device" else \
            {"status": "pass", "message": ""}
    monkeypatch.setattr(gpu_check, "run_phase", fake_run)
    monkeypatch.setattr(gpu_check, "time", types.SimpleNamespace(monotonic=lambda: clock[0], gmtime=time.gmtime,
                                                                 strftime=time.strftime))
    gpu_check.check(str(tmp_path / "r.json"), 280)
    assert seen["device"] == 25
    assert abs(seen["nvrtc"] - 255 * 110 / (110 + 120 + 40 + 50)) < 0.1
    assert sum(seen.values()) <= 280 + 0.5
    assert seen["device-tests"] < 120 and seen["timing"] > 30    # the others shrink in proportion


def test_phase_budgets_fit_five_minutes():
    assert sum(b for _, b in gpu_check.PHASES) <= 280
    assert [n for n, _ in gpu_check.PHASES] == PHASES
