"""FPGA devices the flow targets, and their capacities (pure data, no tools needed)."""
from dataclasses import dataclass

__all__ = ["Target", "TARGETS"]


@dataclass(frozen=True)
class Target:
    family: str
    pnr_args: tuple[str, ...]
    luts: int
    dsps: int
    bram_bits: int


TARGETS = {
    "ice40-up5k": Target("ice40", ("--up5k", "--package", "sg48"), 5280, 8, 30 * 4096),
    "ecp5-25k": Target("ecp5", ("--25k", "--package", "CABGA256"), 24288, 28, 56 * 18432),
    "ecp5-85k": Target("ecp5", ("--85k", "--package", "CABGA381"), 83640, 156, 208 * 18432),
}
