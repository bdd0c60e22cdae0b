"""Simulation of the sequencer with Amaranth's simulator (bit-exact against the microcode model)."""
from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator

from circuitgrad.fixedpoint import FixedPointOverflow
from circuitgrad.progress import Counter

from .sequencer import Sequencer
from .kinds import facts
from .isa import SPRAM_WORDS
from .microcode import Microcode

__all__ = ["simulate", "run_steps", "ReadWriteCollision", "BankConflict", "PROGRESS_CYCLES"]

#: simulated cycles between two ``progress.update`` calls (the count is exact at the end of each run)
PROGRESS_CYCLES = 4096


class ReadWriteCollision(AssertionError):
    """A read port addressed the word being written in the same cycle while the program ran."""


class BankConflict(ReadWriteCollision):
    """Two lanes reached one bank of the interleaved memory in one cycle through one port, at different words."""


def _watch_collisions(sim: Simulator, dut: Sequencer) -> None:
    """Fail the simulation if a read whose data is used addresses a word written in the same cycle, or an
    SPRAM block that another used read or a write uses in the same cycle (its one port serves one access), or
    (several lanes) two used reads of one stream or two writes reach one bank at different words.

    Synthesis declares such collisions undefined (see ``synth.rtlil_text``), which saves the block RAMs'
    bypass logic; this check is what makes that sound. Reads outside ``LOAD`` and ``RUN``, and reads of
    ``b`` by a micro-op without one, are never used, so they may collide freely.
    """
    reads, writes = dut.ports
    writes = writes if isinstance(writes, list) else [writes]
    signals = [s for w in writes for s in (w.en, w.addr)] + [s for port, used in reads for s in (port.addr, used)]
    streams = [getattr(port, "stream", None) for port, _ in reads]
    mem = getattr(dut, "mem", None)                 # (a test's stand-in has no memory of SPRAM blocks)
    base = mem.spram_base if mem is not None and getattr(mem, "sprams", None) else None
    P = getattr(mem, "P", 1)

    def block(addr: int) -> int | None:
        return None if base is None or addr < base else (addr - base) // SPRAM_WORDS

    async def watch(ctx):
        cycle = 0
        async for vals in ctx.tick().sample(*signals):
            vals = vals[2:]
            written = [vals[2 * i + 1] for i in range(len(writes)) if vals[2 * i]]
            rest = vals[2 * len(writes):]
            cycle += 1
            used = [(i // 2, rest[i]) for i in range(0, len(rest), 2) if rest[i + 1]]
            for port, addr in used:
                if addr in written:
                    raise ReadWriteCollision(f"cycle {cycle}: read port {port} reads address {addr} "
                                             f"while it is written")
                j = block(addr)
                if j is not None and (any(block(w) == j for w in written) or
                                      any(block(a) == j for p, a in used if p != port)):
                    raise ReadWriteCollision(f"cycle {cycle}: read port {port} reads SPRAM block {j} (address "
                                             f"{addr}) while another access uses it")
            if P > 1:
                seen: dict = {}
                for port, addr in used:
                    other = seen.setdefault((streams[port], addr % P), addr)
                    if other != addr:
                        raise BankConflict(f"cycle {cycle}: reads of {streams[port]} at addresses {other} and {addr} "
                                           f"both reach bank {addr % P}")
                banks = [w % P for w in written]
                if len(set(banks)) < len(banks):
                    raise BankConflict(f"cycle {cycle}: writes to {sorted(written)} reach one bank twice")

    sim.add_process(watch)


def simulate(mc: Microcode, inputs: list[np.ndarray], max_cycles: int = 10_000_000,
             read_ports: int = 2, macs: int = 1, check_collisions: bool = False,
             bank_words: int | None = None, progress: Counter | None = None) -> tuple[list[np.ndarray], int]:
    """Load ``inputs``, run the program, return ``(outputs, cycles from start to done)``.

    ``check_collisions`` raises :class:`ReadWriteCollision` if a read port ever addresses the word
    being written in the same cycle (slower; the tests use it). ``bank_words`` splits the memory into
    banks as synthesis does (``Sequencer``); results and cycles do not depend on it. ``progress``: an
    object with ``update(n)`` (a tqdm bar, :class:`circuitgrad.progress.Progress`), told the cycles simulated
    every :data:`PROGRESS_CYCLES` cycles.
    """
    return _run(mc, list(zip(mc.inputs, inputs)), [[]], mc.outputs, read_ports, macs, check_collisions, max_cycles,
                bank_words, progress)


def run_steps(mc: Microcode, state: list[np.ndarray], batches: list[tuple[np.ndarray, np.ndarray]],
              read_ports: int = 2, macs: int = 1, check_collisions: bool = False,
              max_cycles: int = 10_000_000, progress: Counter | None = None) -> tuple[list[np.ndarray], int]:
    """Load ``state`` (the first inputs) once, then for each batch load ``x, y`` and run; read the state back:
    ``(state, cycles of every run together)``. ``max_cycles`` bounds each run; ``progress`` as in
    :func:`simulate`."""
    k = len(state)
    runs = [[(mc.inputs[k], x), (mc.inputs[k + 1], y)] for x, y in batches]
    return _run(mc, list(zip(mc.inputs[:k], state)), runs, mc.inputs[:k], read_ports, macs, check_collisions,
                max_cycles, progress=progress)


def _run(mc: Microcode, first: list, runs: list[list], read: list, read_ports: int, macs: int,
         check_collisions: bool, max_cycles: int, bank_words: int | None = None,
         progress: Counter | None = None) -> tuple[list[np.ndarray], int]:
    """Load ``first`` (``(view, array)`` pairs) once; for each run load its pairs, start the program and wait
    until it is done; stop at the first overflow (raised, naming the micro-op and the run); read the
    ``read`` views back. ``(arrays, cycles of every run together)``. ``progress.update`` gets the cycles
    simulated, every :data:`PROGRESS_CYCLES` and at the end of each run."""
    dut = Sequencer(mc, read_ports, macs, bank_words)
    result: dict = {}

    def load(ctx, view, x):
        for addr, v in zip(view.addresses().reshape(-1), np.asarray(x, dtype=np.int64).reshape(-1)):
            dut.poke(ctx, addr, v)

    async def bench(ctx):
        for view, x in first:
            load(ctx, view, x)
        total = 0
        for i, pairs in enumerate(runs):
            for view, x in pairs:
                load(ctx, view, x)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            n = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                n += 1
                if n % PROGRESS_CYCLES == 0 and progress is not None:
                    progress.update(PROGRESS_CYCLES)
                if n > max_cycles:
                    raise RuntimeError(f"FPGA simulation did not finish in {max_cycles} cycles")
            if progress is not None:
                progress.update(n % PROGRESS_CYCLES)
            total += n
            if ctx.get(dut.overflow):
                result["fault"] = (i, ctx.get(dut.fault))
                break
        result["cycles"] = total
        result["read"] = [np.array([dut.peek(ctx, a) for a in v.addresses().reshape(-1)],
                                   dtype=np.int64).reshape(v.shape) for v in read]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if check_collisions:
        _watch_collisions(sim, dut)
    sim.run()
    if "fault" in result:
        i, fault = result["fault"]
        u = mc.ops[fault]
        refuses = facts(u.kind).refuses
        why = f" or had {refuses}" if refuses else ""
        at = f" (run {i + 1} of {len(runs)})" if len(runs) > 1 else ""
        raise FixedPointOverflow(f"{u.source} overflowed {mc.dtype}{why} in the FPGA simulation{at}")
    return result["read"], result["cycles"]


def run_unrolled(design, xs: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Stream the raw batches ``xs`` into an unrolled design, one per cycle; ``(results, cycles)``.

    ``cycles`` runs from the first batch entering to the last result leaving:
    ``latency + len(xs) − 1`` when nothing stalls.
    """
    dut = design.component()
    mc = design.microcode
    shape = mc.outputs[0].shape
    result: dict = {"outs": [], "bad": []}

    async def bench(ctx):
        ctx.set(dut.y.ready, 1)
        n, sent = 0, 0
        while len(result["outs"]) < len(xs):
            if sent < len(xs):
                ctx.set(dut.x.payload, [int(v) for v in np.asarray(xs[sent]).reshape(-1)])
                ctx.set(dut.x.valid, 1)
            else:
                ctx.set(dut.x.valid, 0)
            if ctx.get(dut.y.valid):
                y = ctx.get(dut.y.payload)
                result["outs"].append(np.array([y[j] for j in range(len(dut.y_addrs))], dtype=np.int64).reshape(shape))
                result["cycles"] = n
                if ctx.get(dut.y_overflow):
                    result["bad"].append(len(result["outs"]) - 1)
            if sent < len(xs) and ctx.get(dut.x.ready):
                sent += 1
            await ctx.tick()
            n += 1
            if n > 10 * (design.latency + len(xs)):
                raise RuntimeError("the unrolled pipeline stopped producing results")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    if result["bad"]:
        raise FixedPointOverflow(f"batch {result['bad'][0]} (of {len(xs)}; {len(result['bad'])} in all) overflowed "
                                 f"{mc.dtype} in the unrolled FPGA simulation")
    return result["outs"], result["cycles"]
