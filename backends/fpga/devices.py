"""FPGA devices the flow targets, and their capacities (pure data, no tools needed)."""
from dataclasses import dataclass

__all__ = ["Target", "TARGETS", "BOARDS", "pcf", "lpf", "constraints"]


@dataclass(frozen=True)
class Target:
    family: str
    pnr_args: tuple[str, ...]
    lut4: int                # 4-input LUTs on the device (one per iCE40 logic cell, two per ECP5 slice)
    dsps: int
    bram_blocks: int         # block RAMs on the device
    block_words: int         # words per block at the block's widest data port
    block_width: int         # that port's width in bits
    name: str = ""           # as its maker writes it, for messages ("iCE40 UP5K")

    def blocks(self, depth: int, width: int) -> int:
        """Block RAMs one copy of a ``depth × width`` memory takes (blocks are not shared between copies)."""
        return -(-depth // self.block_words) * -(-width // self.block_width)


TARGETS = {
    "ice40-up5k": Target("ice40", ("--up5k", "--package", "sg48"), 5280, 8, 30, 256, 16, "iCE40 UP5K"),  # SB_RAM40_4K
    "ecp5-25k": Target("ecp5", ("--25k", "--package", "CABGA256"), 24288, 28, 56, 1024, 18, "ECP5-25K"),  # DP16KD
    "ecp5-85k": Target("ecp5", ("--85k", "--package", "CABGA381"), 83640, 156, 208, 1024, 18, "ECP5-85K"),
}


#: board pinouts for ``Top``'s pins.
#: iCEBreaker: 12 MHz clock on pin 35, host port on PMOD 1A, reset on PMOD 1B.
#: ULX3S (v2/v3, ECP5-85F): 25 MHz clock on G2, reset on FIRE1 (R1), host port on GPIO J1 gp[0..5],
#: done and overflow on LEDs 0 and 1 (sites from the board's reference ulx3s_v20.lpf).
BOARDS = {
    "icebreaker": {
        "target": "ice40-up5k", "clock_mhz": 12,
        "pins": {"clk": 35, "rst": 43, "start": 4, "sin": 2, "shift": 47, "write": 45, "read": 3,
                 "sout": 48, "done": 46, "overflow": 44},
    },
    "ulx3s": {
        "target": "ecp5-85k", "clock_mhz": 25,
        "pins": {"clk": "G2", "rst": "R1", "start": "B11", "sin": "A10", "shift": "A9", "write": "B9",
                 "read": "A7", "sout": "C8", "done": "B2", "overflow": "C2"},
    },
}


def pcf(board: str) -> str:
    """The iCE40 pin constraints (``.pcf``) for ``board``."""
    pins = BOARDS[board]["pins"]
    return "".join(f"set_io {name} {pin}\n" for name, pin in pins.items())


def lpf(board: str) -> str:
    """The ECP5 pin constraints (``.lpf``) for ``board``: sites, LVCMOS33 and the clock frequency."""
    b = BOARDS[board]
    lines = []
    for name, site in b["pins"].items():
        pull = "DOWN" if name in ("rst", "start", "sin", "shift", "write", "read") else "NONE"
        lines += [f'LOCATE COMP "{name}" SITE "{site}" ;', f'IOBUF PORT "{name}" PULLMODE={pull} IO_TYPE=LVCMOS33 ;']
    lines.append(f'FREQUENCY PORT "clk" {b["clock_mhz"]} MHZ ;')
    return "\n".join(lines) + "\n"


def constraints(board: str) -> tuple[str, str]:
    """``(file name, text)`` of the pin constraints for ``board``, in its family's format."""
    family = TARGETS[BOARDS[board]["target"]].family
    return ("top.pcf", pcf(board)) if family == "ice40" else ("top.lpf", lpf(board))
