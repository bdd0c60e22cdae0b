"""FPGA devices the flow targets, and their capacities (pure data, no tools needed)."""
from dataclasses import dataclass

__all__ = ["Target", "TARGETS", "BOARDS", "HOSTS", "LUTRAM_CELLS", "in_lutram", "pcf", "lpf", "constraints"]


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
    spram_blocks: int = 0    # single-port RAM blocks of 16K × 16 bits (SB_SPRAM256KA)

    def blocks(self, depth: int, width: int) -> int:
        """Block RAMs one copy of a ``depth × width`` memory takes (blocks are not shared between copies)."""
        return -(-depth // self.block_words) * -(-width // self.block_width)


TARGETS = {
    "ice40-up5k": Target("ice40", ("--up5k", "--package", "sg48"), 5280, 8, 30, 256, 16, "iCE40 UP5K", 4),  # SB_RAM40_4K
    "ecp5-25k": Target("ecp5", ("--25k", "--package", "CABGA256"), 24288, 28, 56, 1024, 18, "ECP5-25K"),  # DP16KD
    "ecp5-85k": Target("ecp5", ("--85k", "--package", "CABGA381"), 83640, 156, 208, 1024, 18, "ECP5-85K"),
}

#: per family, the most LUT RAMs (ECP5 ``TRELLIS_DPR16X4``: 16 words × 4 bits, cost 4 each in yosys'
#: ``lutrams_trellis.txt``) that yosys uses for one read port of a memory rather than a block RAM (a ``DP16KD``,
#: cost 128) and its multiplexers; the iCE40 has no LUT RAM
LUTRAM_CELLS = {"ecp5": 20, "ice40": 0}


def in_lutram(family: str, words: int, width: int) -> bool:
    """Whether yosys maps a read port of a memory of ``words`` words of ``width`` bits to LUT RAM rather than a
    block RAM on ``family`` (ECP5, 16 bits: up to 80 words). yosys weighs the LUT RAMs' multiplexers too, so
    this is its boundary at 8, 16 and 18 bits (``tests`` check it there); at other widths it may differ by one
    group of 16 words."""
    return -(-words // 16) * -(-width // 4) <= LUTRAM_CELLS[family]


#: board pinouts for ``Top``'s pins (``pins``) and for the UART of :class:`~.link.SerialTop` (``uart``: the
#: board's USB serial chip, as ``amaranth-boards`` names the pins: ``rx`` into the FPGA, ``tx`` out of it).
#: iCEBreaker: 12 MHz clock on pin 35, host port on PMOD 1A, reset on PMOD 1B, the FT2232H's second channel.
#: ULX3S (v2/v3, ECP5-85F): 25 MHz clock on G2, reset on FIRE1 (R1), host port on GPIO J1 gp[0..5],
#: done and overflow on LEDs 0 and 1 (sites from the board's reference ulx3s_v20.lpf), the FT231X.
BOARDS = {
    "icebreaker": {
        "target": "ice40-up5k", "clock_mhz": 12,
        "pins": {"clk": 35, "rst": 43, "start": 4, "sin": 2, "shift": 47, "write": 45, "read": 3,
                 "sout": 48, "done": 46, "overflow": 44},
        "uart": {"rx": 6, "tx": 9},
    },
    "ulx3s": {
        "target": "ecp5-85k", "clock_mhz": 25,
        "pins": {"clk": "G2", "rst": "R1", "start": "B11", "sin": "A10", "shift": "A9", "write": "B9",
                 "read": "A7", "sout": "C8", "done": "B2", "overflow": "C2"},
        "uart": {"rx": "M1", "tx": "L4"},
    },
}

#: how the host reaches the design: the UART (:class:`~.link.SerialTop`) or the shift-register pins (``Top``)
HOSTS = ("uart", "pins")
#: inputs pulled to their idle level: low for the pin port's strobes, high for the UART's line
_PULL = {"rst": "DOWN", "start": "DOWN", "sin": "DOWN", "shift": "DOWN", "write": "DOWN", "read": "DOWN",
         "rx": "UP"}


def _pins(board: str, host: str) -> dict:
    if host not in HOSTS:
        raise ValueError(f"unknown host port {host!r}; choose one of {', '.join(HOSTS)}")
    b = BOARDS[board]
    if host == "pins":
        return dict(b["pins"])
    return {**{k: b["pins"][k] for k in ("clk", "rst", "done", "overflow")}, **b["uart"]}


def pcf(board: str, host: str = "pins") -> str:
    """The iCE40 pin constraints (``.pcf``) for ``board``."""
    return "".join(f"set_io {'-pullup yes ' if _PULL.get(name) == 'UP' else ''}{name} {pin}\n"
                   for name, pin in _pins(board, host).items())


def lpf(board: str, host: str = "pins") -> str:
    """The ECP5 pin constraints (``.lpf``) for ``board``: sites, LVCMOS33 and the clock frequency."""
    b = BOARDS[board]
    lines = []
    for name, site in _pins(board, host).items():
        pull = _PULL.get(name, "NONE")
        lines += [f'LOCATE COMP "{name}" SITE "{site}" ;', f'IOBUF PORT "{name}" PULLMODE={pull} IO_TYPE=LVCMOS33 ;']
    lines.append(f'FREQUENCY PORT "clk" {b["clock_mhz"]} MHZ ;')
    return "\n".join(lines) + "\n"


def constraints(board: str, host: str = "pins") -> tuple[str, str]:
    """``(file name, text)`` of the pin constraints for ``board`` and its host port, in its family's format."""
    family = TARGETS[BOARDS[board]["target"]].family
    return ("top.pcf", pcf(board, host)) if family == "ice40" else ("top.lpf", lpf(board, host))
