"""Training on a board from Python: :class:`Board` speaks :mod:`.protocol` over a serial line.

The line is anything with ``write(bytes)`` and ``read(n) -> bytes``: a ``serial.Serial`` (pyserial) on the
board's USB serial port (:func:`open_port`), or :class:`SimulatedLine`, the Amaranth simulation of the same
:class:`~.link.SerialTop` that synthesis builds, so the whole path (driver, UART, sequencer) runs in the
tests without a board::

    board = Board(design, open_port("/dev/ttyUSB1"))       # or Board(design, SimulatedLine(design))
    params = board.step(params, x, y)                      # CompiledModel's interface
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from circuitgrad.fixedpoint import FixedPointOverflow

from . import protocol as PR
from .kinds import facts
from .microcode import View
from .protocol import DEFAULT_BAUD

__all__ = ["Line", "Board", "SimulatedLine", "open_port", "SIM_DIVISOR", "DEFAULT_BAUD"]

#: clock cycles per bit of the simulated line (the smallest the receiver samples reliably at mid-bit)
SIM_DIVISOR = 4


class Line(Protocol):
    def write(self, data: bytes) -> int | None: ...
    def read(self, n: int) -> bytes: ...


def open_port(port: str, baud: int = DEFAULT_BAUD, timeout: float = 5.0) -> Line:
    """The board's USB serial port through pyserial (``pip install 'circuitgrad[fpga]'``)."""
    try:
        import serial
    except ImportError:
        from .extra import MissingExtra
        raise MissingExtra("fpga boards", "pyserial", "fpga") from None
    return serial.Serial(port, baud, timeout=timeout)


def _runs(addresses: np.ndarray) -> list[tuple[int, int, int]]:
    """``(first address, count, position)`` of each run of consecutive addresses (positions in ``addresses``)."""
    out, i = [], 0
    a = [int(v) for v in addresses]
    while i < len(a):
        j = i
        while j + 1 < len(a) and a[j + 1] == a[j] + 1 and j + 1 - i < PR.MAX_COUNT:
            j += 1
        out.append((a[i], j - i + 1, i))
        i = j + 1
    return out


class Board:
    """A :class:`~.Design` on a board behind ``line``: ``step`` and ``predict`` as :class:`CompiledModel` has them.

    A step design trains on chip (``fpga.compile(..., on_chip=True)``): the parameters and optimizer state are
    written once and stay there; ``step`` writes them again only when it is handed others than the ones it
    returned last. ``retries``: how many times a frame whose check failed is sent again."""

    def __init__(self, design, line: Line, retries: int = 2):
        self.design, self.line, self.retries = design, line, retries
        self.mc = design.microcode
        self.width = self.mc.dtype.width
        self.cycles = 0                                   # cycles of the last run, as the board counted them
        self._state: dict | None = None                   # what the board holds (the last ``step`` result)

    # ------------------------------------------------------------------ frames
    def _exchange(self, frame: bytes, reply_bytes: int) -> tuple[int, bytes]:
        for attempt in range(self.retries + 1):
            self.line.write(frame)
            head = self.line.read(2)
            if len(head) < 2 or head[0] != PR.REPLY:
                raise PR.ProtocolError(f"fpga board: no reply to a {chr(frame[1])!r} frame (got {head!r}); is the "
                                       f"bitstream loaded and the port right?")
            status = head[1]
            body = self.line.read(reply_bytes if status & PR.OK else 0)
            end = self.line.read(1)
            if len(end) < 1 or (status + sum(body) + end[0]) & 0xFF:
                raise PR.ProtocolError(f"fpga board: a reply's check failed ({PR.describe_status(status)})")
            if status & PR.BAD_CHECK and attempt < self.retries:
                continue
            if not status & PR.OK:
                raise PR.ProtocolError(f"fpga board: the board refused a {chr(frame[1])!r} frame: "
                                       f"{PR.describe_status(status)}")
            return status, body
        raise AssertionError("unreachable")

    def write(self, addr: int, words) -> None:
        """Store ``words`` from ``addr`` on."""
        w = np.asarray(words, dtype=np.int64).reshape(-1)
        self._exchange(PR.request(PR.WRITE, addr, len(w), PR.encode_words(w, self.width)), 0)

    def read(self, addr: int, count: int) -> np.ndarray:
        """``count`` words from ``addr`` on."""
        _, body = self._exchange(PR.request(PR.READ, addr, count), count * PR.word_bytes(self.width))
        return PR.decode_words(body, self.width)

    def run(self) -> int:
        """Run the program once: the cycles it took (:class:`~circuitgrad.FixedPointOverflow` naming the
        instruction whose micro-op overflowed, as :func:`~circuitgrad.backends.fpga.simulate` does)."""
        status, body = self._exchange(PR.request(PR.START), 6)
        self.cycles = int.from_bytes(body[:4], "big")
        if status & PR.OVERFLOW:
            pc = int.from_bytes(body[4:], "big")             # the first overflowing micro-op
            if pc >= len(self.mc.ops):
                raise PR.ProtocolError(f"fpga board: an overflow at micro-op {pc}, of {len(self.mc.ops)}")
            u = self.mc.ops[pc]
            refuses = facts(u.kind).refuses
            raise FixedPointOverflow(f"{u.source} overflowed {self.mc.dtype}"
                                     f"{f' or had {refuses}' if refuses else ''} on the board")
        return self.cycles

    # ----------------------------------------------------------------- views
    def put(self, view: View, values) -> None:
        """Store an array at a view of the memory."""
        addrs = view.addresses().reshape(-1)
        v = np.asarray(values, dtype=np.int64).reshape(-1)
        if v.size != addrs.size:
            raise ValueError(f"fpga board: {v.size} values for a view of {addrs.size} words")
        for first, n, pos in _runs(addrs):
            self.write(first, v[pos:pos + n])

    def get(self, view: View) -> np.ndarray:
        """The array at a view of the memory."""
        addrs = view.addresses()
        flat = addrs.reshape(-1)
        out = np.empty(flat.size, dtype=np.int64)
        for first, n, pos in _runs(flat):
            out[pos:pos + n] = self.read(first, n)
        return out.reshape(addrs.shape)

    # ------------------------------------------------------------- the model
    def _raw(self, params, names) -> list[np.ndarray]:
        fx = self.design.model
        return [np.asarray(params[n]) if np.issubdtype(np.asarray(params[n]).dtype, np.integer)
                else fx.cast(params[n], n) for n in names]

    def step(self, params, x, y) -> dict[str, np.ndarray]:
        """One training step on the board; the updated parameters and optimizer state, read back."""
        if self.design.function != "step":
            raise ValueError(f"fpga board: this design runs {self.design.function!r}, not 'step'; build it with "
                             f"fpga.compile(model, function='step')")
        fx = self.design.model
        names = fx.param_names + fx.state_names
        k = len(names)
        if params is not self._state:
            for view, v in zip(self.mc.inputs[:k], self._raw(params, names)):
                self.put(view, v)
        self.put(self.mc.inputs[k], fx._x(x, "step"))
        self.put(self.mc.inputs[k + 1], fx._targets(y))
        self.run()
        self._state = dict(zip(names, (self.get(v) for v in self.mc.inputs[:k])))
        return self._state

    def predict(self, params, x) -> np.ndarray:
        """The model's outputs for one batch, computed on the board (raw fixed-point values)."""
        if self.design.function != "predict":
            raise ValueError(f"fpga board: this design runs {self.design.function!r}, not 'predict'; build it "
                             f"with fpga.compile(model, function='predict')")
        fx = self.design.model
        for view, v in zip(self.mc.inputs[:-1], self._raw(params, fx.param_names)):
            self.put(view, v)
        self.put(self.mc.inputs[-1], fx._x(x, "predict"))
        self.run()
        return self.get(self.mc.outputs[0])


class SimulatedLine:
    """The serial line of a :class:`~.link.SerialTop` in Amaranth's simulator: what the driver writes reaches
    the top's ``rx`` pin bit by bit, and ``read`` runs the simulation until the top has sent that many bytes
    on ``tx`` (``TimeoutError`` after ``max_cycles`` without them)."""

    def __init__(self, design, divisor: int = SIM_DIVISOR, max_cycles: int = 10_000_000):
        from amaranth.sim import Simulator

        from .link import SerialTop
        self.top = SerialTop(design.component(), divisor)
        self.divisor, self.max_cycles = divisor, max_cycles
        self._out: list[int] = []                   # bytes still to send to the board
        self._in: list[int] = []                    # bytes the board sent
        self.cycles = 0
        self.sim = Simulator(self.top)
        self.sim.add_clock(1e-6)
        self.sim.add_testbench(self._drive, background=True)
        self.sim.add_testbench(self._listen, background=True)

    async def _drive(self, ctx):
        top, d = self.top, self.divisor
        while True:
            if not self._out:
                await ctx.tick()
                continue
            b = self._out.pop(0)
            for bit in [0] + [(b >> i) & 1 for i in range(8)] + [1]:
                ctx.set(top.rx, bit)
                await ctx.tick().repeat(d)

    async def _listen(self, ctx):
        top, d = self.top, self.divisor
        while True:
            await ctx.changed(top.tx)                     # a falling edge: the start bit
            if ctx.get(top.tx):
                continue
            await ctx.tick().repeat(d // 2)
            b = 0
            for i in range(8):
                await ctx.tick().repeat(d)
                b |= ctx.get(top.tx) << i
            await ctx.tick().repeat(d)                    # the stop bit
            self._in.append(b)

    def write(self, data: bytes) -> int:
        self._out.extend(data)
        return len(data)

    def read(self, n: int) -> bytes:
        start = self.cycles
        while len(self._in) < n:
            if self.cycles - start > self.max_cycles:
                raise TimeoutError(f"simulated line: {n} bytes did not arrive in {self.max_cycles} cycles")
            self.sim.run_until((self.cycles + 64) * 1e-6)
            self.cycles += 64
        out, self._in = bytes(self._in[:n]), self._in[n:]
        return out
