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

from circuitgrad.fixedpoint import FixedPointOverflow, dequantize

from . import protocol as PR
from .kinds import facts
from .microcode import View
from .protocol import DEFAULT_BAUD

__all__ = ["Line", "Board", "SimulatedLine", "open_port", "SIM_DIVISOR", "DEFAULT_BAUD"]

#: clock cycles per bit of the simulated line (the smallest the receiver samples reliably at mid-bit)
SIM_DIVISOR = 4


class Line(Protocol):
    """What :class:`Board` needs of a serial line: pyserial's ``write``, ``read`` (fewer bytes on a timeout) and
    ``reset_input_buffer``, and ``idle(bits)``: let the line stay quiet for that many bit times."""
    def write(self, data: bytes) -> int | None: ...
    def read(self, n: int) -> bytes: ...
    def reset_input_buffer(self) -> None: ...
    def idle(self, bits: int) -> None: ...


class _Port:
    """A pyserial port as a :class:`Line` (``idle`` sleeps)."""

    def __init__(self, port, baud: int):
        self.port, self.baud = port, baud

    def write(self, data: bytes) -> int | None:
        return self.port.write(data)

    def read(self, n: int) -> bytes:
        return self.port.read(n)

    def reset_input_buffer(self) -> None:
        self.port.reset_input_buffer()

    def idle(self, bits: int) -> None:
        import time
        time.sleep(bits / self.baud + 0.001)


def open_port(port: str, baud: int = DEFAULT_BAUD, timeout: float = 5.0) -> Line:
    """The board's USB serial port through pyserial (``pip install 'circuitgrad[fpga]'``)."""
    try:
        import serial
    except ImportError:
        from .extra import MissingExtra
        raise MissingExtra("fpga boards", "pyserial", "fpga") from None
    p = serial.Serial(port, baud, timeout=timeout)
    p.reset_input_buffer()
    return _Port(p, baud)


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
    written once and stay there; ``step`` writes them again unless it is handed exactly the values the board
    holds (the ones it returned last, unchanged). ``retries``: how many times a frame is sent again after the
    board refused its check, or after a reply that was lost or damaged (the board drops a cut-short frame
    after :data:`~.protocol.TIMEOUT_BITS` quiet bit times, and the driver waits that long first)."""

    def __init__(self, design, line: Line, retries: int = 2):
        self.design, self.line, self.retries = design, line, retries
        self.mc = design.microcode
        self.width = self.mc.dtype.width
        self.cycles = 0                                   # cycles of the last run, as the board counted them
        self._held: dict[str, np.ndarray] | None = None   # what the board's memory holds, when known

    # ------------------------------------------------------------------ frames
    def _read(self, n: int) -> bytes:
        """Exactly ``n`` bytes, or fewer when the line times out with nothing more."""
        out = b""
        while len(out) < n:
            got = self.line.read(n - len(out))
            if not got:
                break
            out += got
        return out

    def _resync(self) -> None:
        """After a lost or damaged reply: let the board drop what it was receiving, and forget stale bytes."""
        self.line.idle(2 * PR.TIMEOUT_BITS)
        self.line.reset_input_buffer()

    def _exchange(self, frame: bytes, reply_bytes: int) -> tuple[int, bytes]:
        what = chr(frame[1])
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self.line.write(frame)
            head = self._read(2)
            if len(head) < 2 or head[0] != PR.REPLY:
                if not last:
                    self._resync()
                    continue
                raise PR.ProtocolError(f"fpga board: no reply to a {what!r} frame (got {head!r}); is the "
                                       f"bitstream loaded and the port right?")
            status = head[1]
            want = reply_bytes if status & PR.OK else 0
            body, end = self._read(want), self._read(1)
            if len(body) < want or len(end) < 1 or (status + sum(body) + end[0]) & 0xFF:
                if not last:
                    self._resync()
                    continue
                raise PR.ProtocolError(f"fpga board: the reply to a {what!r} frame was cut short or damaged "
                                       f"({len(body)} of {want} bytes; {PR.describe_status(status)})")
            if status & PR.BAD_CHECK and not last:
                continue
            if not status & PR.OK:
                raise PR.ProtocolError(f"fpga board: the board refused a {what!r} frame: "
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
        raw = self._raw(params, names)
        held, self._held = self._held, None               # unknown until the step has been read back
        if held is None or any(not np.array_equal(held[n], v) for n, v in zip(names, raw)):
            for view, v in zip(self.mc.inputs[:k], raw):
                self.put(view, v)
        self.put(self.mc.inputs[k], fx._x(x, "step"))
        self.put(self.mc.inputs[k + 1], fx._targets(y))
        self.run()
        state = {n: self.get(v) for n, v in zip(names, self.mc.inputs[:k])}
        self._held = {n: a.copy() for n, a in state.items()}
        return state

    def predict(self, params, x) -> np.ndarray:
        """The model's outputs for any number of rows, computed on the board a batch at a time and dequantized,
        as :meth:`CompiledModel.predict` returns them (the parameters are written once)."""
        if self.design.function != "predict":
            raise ValueError(f"fpga board: this design runs {self.design.function!r}, not 'predict'; build it "
                             f"with fpga.compile(model, function='predict')")
        fx = self.design.model
        self._held = None
        for view, v in zip(self.mc.inputs[:-1], self._raw(params, fx.param_names)):
            self.put(view, v)
        xs, B = fx._x(x, "predict"), fx.batch
        outs = []
        for i in range(0, xs.shape[0], B):
            chunk = xs[i:i + B]
            if chunk.shape[0] < B:                         # the last batch padded with zero rows
                chunk = np.concatenate([chunk, np.zeros((B - chunk.shape[0],) + chunk.shape[1:], chunk.dtype)])
            self.put(self.mc.inputs[-1], chunk)
            self.run()
            outs.append(self.get(self.mc.outputs[0]))
        n = xs.shape[0]
        y = np.concatenate(outs)[:n] if outs else np.zeros((0,) + fx.y_type.shape[1:], dtype=np.int64)
        return dequantize(y, fx.dtype)


class SimulatedLine:
    """The serial line of a :class:`~.link.SerialTop` in Amaranth's simulator: what the driver writes reaches
    the top's ``rx`` pin bit by bit, and ``read`` runs the simulation until the top has sent that many bytes
    on ``tx``, or returns fewer after ``max_cycles`` (as pyserial does on a timeout)."""

    def __init__(self, design, divisor: int = SIM_DIVISOR, max_cycles: int | None = None):
        from amaranth.sim import Simulator

        from .link import SerialTop
        self.top = SerialTop(design.component(), divisor)
        # a read gives up after this many cycles with the reply incomplete: longer than a run of the program
        self.divisor, self.max_cycles = divisor, max_cycles or max(200_000, 4 * design.cycles)
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

    def _advance(self, cycles: int) -> None:
        self.cycles += cycles
        self.sim.run_until(self.cycles * 1e-6)

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes: fewer (as pyserial on a timeout) when ``max_cycles`` pass without them."""
        start = self.cycles
        while len(self._in) < n and self.cycles - start < self.max_cycles:
            self._advance(64)
        out, self._in = bytes(self._in[:n]), self._in[n:]
        return out

    def reset_input_buffer(self) -> None:
        self._in.clear()

    def idle(self, bits: int) -> None:
        while self._out:                              # what was written goes out first
            self._advance(64)
        self._advance(bits * self.divisor)
