"""The cost model's netlist statistics (backends/fpga/netlist.py) on RTLIL that Amaranth emits."""
import pytest
from amaranth import Elaboratable, Module, Signal, signed
from amaranth.back import rtlil

from circuitgrad.backends.fpga.netlist import adder_bits, adder_levels


class Sums(Elaboratable):
    """``y = a + b + c + d`` as a chain, or a balanced tree of kept wires; ``reg`` registers the first sum."""

    def __init__(self, shape: str, reg: bool = False):
        self.shape, self.reg = shape, reg
        self.a, self.b, self.c, self.d = (Signal(signed(8), name=n) for n in "abcd")
        self.y = Signal(signed(12))

    def elaborate(self, platform):
        m = Module()
        a, b, c, d = self.a, self.b, self.c, self.d
        if self.shape == "chain":
            first = Signal(signed(9), attrs={"keep": 1})
            m.d["sync" if self.reg else "comb"] += first.eq(a + b)
            m.d.comb += self.y.eq(first + c - d)
        else:
            left, right = Signal(signed(9), attrs={"keep": 1}), Signal(signed(9), attrs={"keep": 1})
            m.d.comb += [left.eq(a + b), right.eq(c + d), self.y.eq(left + right)]
        return m


def _il(design) -> str:
    return rtlil.convert(design, ports=[design.a, design.b, design.c, design.d, design.y])


@pytest.mark.parametrize("shape, reg, levels", [("chain", False, 3), ("tree", False, 2), ("chain", True, 2)])
def test_adder_levels_count_the_adders_between_registers(shape, reg, levels):
    assert adder_levels(_il(Sums(shape, reg))) == levels


def test_adder_bits_sum_the_widths_of_adders_and_subtractors():
    add, sub = adder_bits(_il(Sums("chain")))
    # a + b: 9 bits; (a + b) + c: 10 bits; … − d: 11 bits (Amaranth widens each result by one bit)
    assert (add, sub) == (9 + 10, 11)


def test_a_combinational_loop_is_left_out_not_followed_forever():
    text = """module \\top
  wire width 4 \\p
  wire width 4 \\q
  wire width 4 \\r
  cell $add $1
    parameter \\Y_WIDTH 4
    connect \\A \\p
    connect \\B \\q
    connect \\Y \\q
  end
  cell $add $2
    parameter \\Y_WIDTH 4
    connect \\A \\p
    connect \\B \\p
    connect \\Y \\r
  end
end
"""
    assert adder_levels(text) == 1          # $1 feeds itself (a loop: left out); $2 is one level
    assert adder_bits(text) == (8, 0)
