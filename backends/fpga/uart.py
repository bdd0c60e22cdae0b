"""A UART (8 data bits, no parity, one stop bit: 8N1) as two Amaranth components with byte streams.

``divisor`` is clock cycles per bit (12 for 1 Mbaud at the iCEBreaker's 12 MHz, 25 at the ULX3S's 25 MHz; the
simulation of the link uses 4). The line idles high; a byte is a low start bit, eight data bits least
significant first, and a high stop bit::

    rx ──sync──▶ [ UARTReceiver ]  ──stream(8)──▶       ──stream(8)──▶ [ UARTTransmitter ] ──▶ tx

The receiver samples each bit in its middle, ``divisor // 2`` cycles after the start bit's falling edge and
then every ``divisor`` cycles, and drops a byte whose stop bit is low (a framing error). It has no buffer:
its consumer must take a byte within the next byte's time (``stream.ready`` is ignored).
"""
from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UARTReceiver", "UARTTransmitter", "divisor"]


def divisor(clock_hz: float, baud: int) -> int:
    """Clock cycles per bit for ``baud`` at ``clock_hz``; refused when the rate is off by more than 2%."""
    d = round(clock_hz / baud)
    if d < 2 or abs(clock_hz / d - baud) > 0.02 * baud:
        raise ValueError(f"uart: {baud} baud is not reachable from a {clock_hz / 1e6:g} MHz clock "
                         f"(closest: {clock_hz / max(d, 2):.0f} baud); choose a rate that divides the clock")
    return d


def _cycles_per_bit(divisor: int, who: str) -> int:
    if divisor < 2:
        raise ValueError(f"{who}: divisor must be at least 2 cycles per bit, got {divisor}")
    return divisor


class UARTReceiver(wiring.Component):
    """``rx`` (the line) to a stream of bytes (``valid`` for one cycle per byte)."""

    def __init__(self, divisor: int):
        self.divisor = _cycles_per_bit(divisor, "UARTReceiver")
        super().__init__({"rx": In(1, init=1), "stream": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        sync = Signal(2, init=0b11)              # two flip-flops against metastability
        m.d.sync += sync.eq((sync << 1) | self.rx)
        line = sync[1]
        timer = Signal(range(d + d // 2 + 1))
        bits = Signal(8)
        count = Signal(range(9))
        m.d.sync += self.stream.valid.eq(0)
        with m.FSM():
            with m.State("idle"):
                with m.If(~line):
                    m.d.sync += timer.eq(d // 2 - 1)
                    m.next = "start"
            with m.State("start"):                # the start bit's middle: still low, else a glitch
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(line):
                    m.next = "idle"
                with m.Else():
                    m.d.sync += [timer.eq(d - 1), count.eq(0)]
                    m.next = "data"
            with m.State("data"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [bits.eq((bits >> 1) | (line << 7)), count.eq(count + 1), timer.eq(d - 1)]
                    with m.If(count == 7):
                        m.next = "stop"
            with m.State("stop"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    with m.If(line):
                        m.d.sync += [self.stream.payload.eq(bits), self.stream.valid.eq(1)]
                    m.next = "idle"
        return m


class UARTTransmitter(wiring.Component):
    """A stream of bytes to ``tx`` (the line); ``ready`` while it is idle."""

    def __init__(self, divisor: int):
        self.divisor = _cycles_per_bit(divisor, "UARTTransmitter")
        super().__init__({"tx": Out(1, init=1), "stream": In(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        frame = Signal(10, init=0x3FF)           # stop bit, data, start bit: shifted out from the bottom
        left = Signal(range(11))
        timer = Signal(range(d))
        m.d.comb += [self.tx.eq(frame[0]), self.stream.ready.eq(left == 0)]
        with m.If(left == 0):
            with m.If(self.stream.valid):
                m.d.sync += [frame.eq((1 << 9) | (self.stream.payload << 1)), left.eq(10), timer.eq(d - 1)]
        with m.Elif(timer != 0):
            m.d.sync += timer.eq(timer - 1)
        with m.Else():
            m.d.sync += [frame.eq((frame >> 1) | (1 << 9)), left.eq(left - 1), timer.eq(d - 1)]
        return m
