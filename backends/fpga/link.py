"""The sequencer behind a UART: :class:`SerialTop`, the top a board's bitstream holds.

It speaks the frames of :mod:`.protocol` over two pins (``rx``, ``tx``) and drives the sequencer's host
memory port and ``start``::

    rx ─▶ UARTReceiver ─▶ request FSM ──host_addr/wdata/we──▶ Sequencer ──host_rdata, done, overflow──┐
    tx ◀─ UARTTransmitter ◀─ reply FSM ◀────────────────────────────────────────────────────────────────┘

``done`` and ``overflow`` also drive two pins (LEDs on the boards). Reads and writes reach memory only
while the sequencer is idle: a request arrives only after the reply to the one before, and ``S`` replies
when the program is done.
"""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from . import protocol as PR
from .sequencer import Sequencer
from .uart import UARTReceiver, UARTTransmitter

__all__ = ["SerialTop", "LINK_PINS"]

#: the pins of a serial top
LINK_PINS = {"rx": In(1, init=1), "tx": Out(1, init=1), "done": Out(1), "overflow": Out(1)}


class SerialTop(wiring.Component):
    """``seq`` behind the framed UART protocol at ``divisor`` clock cycles per bit."""

    def __init__(self, seq: Sequencer, divisor: int):
        self.seq, self.divisor = seq, divisor
        self.word_bytes = PR.word_bytes(seq.W)
        super().__init__(LINK_PINS)

    def elaborate(self, platform):
        m = Module()
        seq = self.seq
        m.submodules.seq = seq
        m.submodules.rx = rx = UARTReceiver(self.divisor)
        m.submodules.tx = tx = UARTTransmitter(self.divisor)
        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx), self.done.eq(seq.done), self.overflow.eq(seq.overflow)]

        B, W = self.word_bytes, seq.W
        byte, got = rx.stream.payload, rx.stream.valid
        cmd, addr, count, total = Signal(8), Signal(24), Signal(16), Signal(8)
        status = Signal(8)
        word = Signal(8 * B)
        k = Signal(range(B + 1))
        cycles, fault = Signal(32), Signal(16)
        write = Signal()                               # one cycle: store ``word`` at ``addr``
        wait = Signal(range(seq.host_latency + 2))
        out = Signal(8 * max(B, 6))                    # the bytes still to send, most significant first
        left = Signal(range(max(B, 6) + 1))
        sent = Signal(8)                               # the reply's bytes after the sync byte, summed
        bad_addr = Signal()
        start = Signal()

        m.d.comb += [seq.host_addr.eq(addr), seq.host_wdata.eq(word[:W]), seq.host_we.eq(write),
                     seq.start.eq(start)]
        quiet = Signal(range(PR.TIMEOUT_BITS * self.divisor + 1))     # cycles since the last byte received
        m.d.sync += quiet.eq(Mux(got, 0, Mux(quiet == PR.TIMEOUT_BITS * self.divisor, quiet, quiet + 1)))
        gave_up = quiet == PR.TIMEOUT_BITS * self.divisor
        m.d.sync += write.eq(0)
        with m.If(write):                              # the word is stored this cycle: then the next address
            m.d.sync += addr.eq(addr + 1)

        def take(m, then):
            """On a received byte: add it to the check, and go to ``then``."""
            m.d.sync += total.eq(total + byte)
            m.next = then

        def send(m, value, nbytes, then):
            """Queue ``nbytes`` bytes of ``value`` (most significant first), then go to ``then``."""
            m.d.sync += [out.eq(value << (8 * (len(out) // 8 - nbytes))), left.eq(nbytes)]
            m.next = then

        with m.FSM():
            with m.State("sync"):
                with m.If(got & (byte == PR.REQUEST)):
                    m.d.sync += [total.eq(0), addr.eq(0), count.eq(0)]
                    m.next = "cmd"
            with m.State("cmd"):
                self._drop_when(m, gave_up)
                with m.If(got):
                    m.d.sync += cmd.eq(byte)
                    take(m, "addr0")
            for i in range(3):
                with m.State(f"addr{i}"):
                    self._drop_when(m, gave_up)
                    with m.If(got):
                        m.d.sync += addr.eq(Cat(byte, addr[:16]))
                        take(m, f"addr{i + 1}" if i < 2 else "count0")
            with m.State("count0"):
                self._drop_when(m, gave_up)
                with m.If(got):
                    m.d.sync += count.eq(Cat(byte, count[:8]))
                    take(m, "count1")
            with m.State("count1"):
                self._drop_when(m, gave_up)
                with m.If(got):
                    n = Cat(byte, count[:8])
                    m.d.sync += [count.eq(n), k.eq(0),
                                 bad_addr.eq(((cmd == PR.WRITE) | (cmd == PR.READ)) & (addr + n > seq.depth))]
                    with m.If((cmd == PR.WRITE) & (n != 0)):
                        take(m, "data")
                    with m.Else():
                        take(m, "check")
            with m.State("data"):
                self._drop_when(m, gave_up)
                with m.If(got):
                    m.d.sync += [word.eq(Cat(byte, word[:-8])), k.eq(k + 1), total.eq(total + byte)]
                    with m.If(k == B - 1):
                        m.d.sync += [k.eq(0), count.eq(count - 1), write.eq(~bad_addr)]
                        with m.If(count == 1):
                            m.next = "check"
            with m.State("check"):
                self._drop_when(m, gave_up)
                with m.If(got):
                    ok = (total + byte)[:8] == 0
                    known = (cmd == PR.WRITE) | (cmd == PR.READ) | (cmd == PR.START) | (cmd == PR.FLAGS)
                    m.d.sync += status.eq(Cat(ok & known & ~bad_addr, ~ok, ok & (~known | bad_addr),
                                              seq.overflow))
                    with m.If(ok & known & ~bad_addr & (cmd == PR.START)):
                        m.next = "run"
                    with m.Else():
                        m.next = "reply"
            with m.State("run"):
                m.d.comb += start.eq(1)
                m.d.sync += cycles.eq(1)
                m.next = "running"
            with m.State("running"):
                with m.If(seq.done):
                    m.d.sync += [status.eq(Cat(1, 0, 0, seq.overflow)), fault.eq(seq.fault)]
                    m.next = "reply"
                with m.Else():
                    m.d.sync += cycles.eq(cycles + 1)
            with m.State("reply"):
                with m.If(tx.stream.ready):
                    m.d.comb += [tx.stream.payload.eq(PR.REPLY), tx.stream.valid.eq(1)]
                    m.d.sync += sent.eq(0)
                    send(m, status, 1, "send_status")
            with m.State("send_status"):
                self._send_byte(m, tx, out, left, sent)
                with m.If(left == 0):
                    with m.If(status[0] & (cmd == PR.READ) & (count != 0)):
                        m.d.sync += wait.eq(0)
                        m.next = "read"
                    with m.Elif(status[0] & ((cmd == PR.START) | (cmd == PR.FLAGS))):
                        send(m, Cat(fault, cycles), 6, "send_flags")
                    with m.Else():
                        m.next = "send_check"
            with m.State("send_flags"):
                self._send_byte(m, tx, out, left, sent)
                with m.If(left == 0):
                    m.next = "send_check"
            with m.State("read"):                       # addr is on the port: its word comes host_latency later
                m.d.sync += wait.eq(wait + 1)
                with m.If(wait == seq.host_latency):
                    send(m, seq.host_rdata.as_unsigned(), B, "send_word")
            with m.State("send_word"):
                self._send_byte(m, tx, out, left, sent)
                with m.If(left == 0):
                    m.d.sync += [addr.eq(addr + 1), count.eq(count - 1), wait.eq(0)]
                    with m.If(count == 1):
                        m.next = "send_check"
                    with m.Else():
                        m.next = "read"
            with m.State("send_check"):
                with m.If(tx.stream.ready):
                    m.d.comb += [tx.stream.payload.eq(-sent), tx.stream.valid.eq(1)]
                    m.next = "sync"
        return m

    @staticmethod
    def _drop_when(m, gave_up) -> None:
        """A request cut short: back to waiting for a sync byte (a later state's ``m.next`` on a byte wins)."""
        with m.If(gave_up):
            m.next = "sync"

    @staticmethod
    def _send_byte(m, tx, out, left, sent) -> None:
        """Hand the next queued byte to the transmitter when it is ready (``left == 0``: none queued)."""
        top = out[-8:]
        with m.If((left != 0) & tx.stream.ready):
            m.d.comb += [tx.stream.payload.eq(top), tx.stream.valid.eq(1)]
            m.d.sync += [out.eq(out << 8), left.eq(left - 1), sent.eq(sent + top)]
