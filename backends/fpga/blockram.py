"""One ECP5 block RAM as a memory bank builds it: a ``DP16KD`` (1024 × 18 bits) whose output register holds
the word read.

::

    w_addr, w_data, w_en ──► port A (write) ─┐
                                             DP16KD ──► output register ──► data   (2 cycles after r_addr)
    r_addr ─────────────────► port B (read) ─┘

yosys maps a memory's read port to ``DP16KD`` with ``REGMODE_B = "NOREG"`` and leaves the register after it in
the fabric: the block's clock-to-output (5.8 ns at speed grade 6) and the route to that register then share a
cycle. With ``REGMODE_B = "OUTREG"`` the block registers the word itself, with the same latency: the word of
the address registered at one clock edge is on the output after the next, as a synchronous read followed by a
register is. A bank small enough for LUT RAM stays a memory (:func:`.devices.in_lutram`: yosys maps it to
``TRELLIS_DPR16X4`` cells, and a block would be wasted on it). Every pin is connected as yosys'
``brams_map_16kd.v`` connects a 16-bit memory (``tests`` compare the two netlists); the contents are the
memory's initial words, 16 per ``INITVAL_xx`` of 20-bit slots.
"""
from __future__ import annotations

from collections.abc import Sequence

from amaranth import ClockSignal, Const, Instance, Module, Value

__all__ = ["DP16KD_WORDS", "DP16KD_WIDTH", "dp16kd", "initvals"]

#: words and bits of a ``DP16KD`` in its 18-bit mode
DP16KD_WORDS, DP16KD_WIDTH = 1024, 18


def initvals(words: Sequence[int], width: int) -> dict[str, Const]:
    """``INITVAL_00`` … ``INITVAL_3F`` for ``words`` (at most 1024, each ``width`` ≤ 18 bits, two's complement):
    word ``16·i + j`` in bits ``20·j`` … ``20·j + width − 1`` of ``INITVAL_i``."""
    if len(words) > DP16KD_WORDS or width > DP16KD_WIDTH:
        raise ValueError(f"a DP16KD holds {DP16KD_WORDS} words of ≤ {DP16KD_WIDTH} bits, got {len(words)} of {width}")
    mask = (1 << width) - 1
    out = {}
    for i in range(DP16KD_WORDS // 16):
        v = 0
        for j, word in enumerate(words[16 * i:16 * i + 16]):
            v |= (int(word) & mask) << (20 * j)
        out[f"INITVAL_{i:02X}"] = Const(v, 320)
    return out


def dp16kd(m: Module, name: str, init: Sequence[int], w_addr: Value, w_data: Value, w_en: Value, r_addr: Value,
           r_data: Value) -> None:
    """Add to ``m`` a ``DP16KD`` named ``name`` holding ``init``: port A writes ``w_data`` at ``w_addr`` at the
    end of a cycle with ``w_en``, port B reads ``r_addr`` into its output register (``r_data``, 2 cycles after
    the address). Addresses are word addresses of up to 10 bits, words up to 18 bits."""
    width = len(r_data)
    bits = lambda v, n: [v[i] if i < len(v) else Const(0, 1) for i in range(n)]     # noqa: E731
    pins: dict = {"i_CLKA": ClockSignal(), "i_CLKB": ClockSignal(), "i_CEA": Const(1, 1), "i_CEB": Const(1, 1),
                  "i_OCEA": Const(1, 1), "i_OCEB": Const(1, 1), "i_RSTA": Const(0, 1), "i_RSTB": Const(0, 1),
                  "i_WEA": w_en, "i_WEB": Const(0, 1)}
    for port in "AB":
        pins.update({f"i_CS{port}{i}": Const(0, 1) for i in range(3)})
    # 18-bit mode: the word address on AD4…AD13, the write's two byte enables on ADA0 and ADA1
    pins.update({"i_ADA0": w_en, "i_ADA1": w_en, "i_ADA2": Const(0, 1), "i_ADA3": Const(0, 1)})
    pins.update({f"i_ADA{4 + i}": b for i, b in enumerate(bits(w_addr, 10))})
    pins.update({f"i_ADB{i}": Const(0, 1) for i in range(4)})
    pins.update({f"i_ADB{4 + i}": b for i, b in enumerate(bits(r_addr, 10))})
    # the data inputs past the word, and all of port B's, stay unconnected, as yosys leaves them
    pins.update({f"i_DIA{i}": w_data[i] for i in range(len(w_data))})
    pins.update({f"o_DOB{i}": r_data[i] for i in range(width)})
    params = {f"p_{k}": v for k, v in initvals(init, width).items()}
    m.submodules[name] = Instance(
        "DP16KD", p_DATA_WIDTH_A=DP16KD_WIDTH, p_DATA_WIDTH_B=DP16KD_WIDTH, p_REGMODE_A="NOREG",
        p_REGMODE_B="OUTREG", p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC", p_CSDECODE_A="0b000",
        p_CSDECODE_B="0b000", p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL", p_GSR="DISABLED", **params, **pins)
