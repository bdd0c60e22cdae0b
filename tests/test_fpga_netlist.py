"""The cost model's netlist statistics (backends/fpga/netlist.py) on RTLIL that Amaranth emits."""
import pytest
from amaranth import Elaboratable, Module, Signal, signed
from amaranth.back import rtlil

from circuitgrad.backends.fpga.netlist import adder_bits, sum_operands


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


@pytest.mark.parametrize("shape, reg, operands", [("chain", False, 4), ("tree", False, 4), ("chain", True, 3)])
def test_sum_operands_follow_single_use_sums_up_to_a_register(shape, reg, operands):
    # a + b + c − d is one sum of four operands, as a chain or a tree; a registered a + b is one operand
    assert sum_operands(_il(Sums(shape, reg))) == operands


class Shared(Elaboratable):
    """``s = a + b`` used by two sums: ``y = s + c``, ``z = s + d``."""

    def __init__(self):
        self.a, self.b, self.c, self.d = (Signal(signed(8), name=n) for n in "abcd")
        self.y, self.z = Signal(signed(10)), Signal(signed(10))

    def elaborate(self, platform):
        m = Module()
        s = Signal(signed(9))
        m.d.comb += [s.eq(self.a + self.b), self.y.eq(s + self.c), self.z.eq(s + self.d)]
        return m


def test_a_sum_used_twice_is_one_operand_of_each_use():
    d = Shared()
    text = rtlil.convert(d, ports=[d.a, d.b, d.c, d.d, d.y, d.z])
    assert sum_operands(text) == 2          # yosys keeps s: y and z each add two operands, not three


def _loop_text() -> str:
    return """module \\top
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


def test_an_adder_loop_counts_once_and_ends():
    text = _loop_text()
    assert sum_operands(text) == 2          # $1 feeds itself (its own result counts one operand); $2 adds two
    assert adder_bits(text) == (8, 0)
