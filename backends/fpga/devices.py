"""FPGA devices the flow targets, and their capacities (pure data, no tools needed)."""
from dataclasses import dataclass

__all__ = ["Target", "TARGETS", "BOARDS", "pcf"]


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


#: board pinouts for ``Top``'s pins (iCEBreaker: 12 MHz clock on pin 35, host port on PMOD 1A, reset on PMOD 1B)
BOARDS = {
    "icebreaker": {
        "target": "ice40-up5k",
        "pins": {"clk": 35, "rst": 43, "start": 4, "sin": 2, "shift": 47, "write": 45, "read": 3,
                 "sout": 48, "done": 46, "overflow": 44},
    },
}


def pcf(board: str) -> str:
    """The iCE40 pin constraints (``.pcf``) for ``board``."""
    pins = BOARDS[board]["pins"]
    return "".join(f"set_io {name} {pin}\n" for name, pin in pins.items())
