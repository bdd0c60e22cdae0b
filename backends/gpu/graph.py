"""A training step replayed as one CUDA graph: one launch a step instead of one per kernel and product.

    step = cg.compile_model(model, loss=..., optimizer=..., backend="cupy", donate=True, graph=True)

Call 1 runs the step as usual (it compiles and loads every kernel, and cuBLAS picks its algorithms).
Call 2 copies its arguments into buffers of the graph's own, captures the step on a capturing stream (CuPy
launches nothing while it captures: every kernel and product is recorded) and replays the graph. From then
on a call copies each argument that is not already the graph's own buffer into it, and replays.

What this means for a caller:

* **Parameters keep their addresses.** ``donate=True`` is required: the step writes the updated
  parameters into the graph's parameter buffers, which it returns; passing them back costs no copy.
  Any other array passed (the next batch, a learning rate) is copied in, one copy launch each.
* **Outputs are the graph's buffers**, overwritten by the next call (as ``donate=True`` already says of
  the parameters).
* **Memory**: the graph's intermediates live in a memory pool of its own (``cupy.cuda.MemoryPool``),
  reserved for as long as the step is; nothing else allocates from it, so no later allocation can take
  a buffer the graph still writes.
* Matrix products go through :mod:`~.blas` (CuPy refuses cuBLAS calls during a capture).

Under the host execution mode (:mod:`~.host.run`) the stand-in records the captured launches and
products without running them, and a replay runs the recorded list on the same buffers: a step that
depended on anything but its captured work (a host computation, a buffer allocated per call) gives a
different result there, as it would on a device.
"""
from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["Graphed"]


class Graphed:
    """``fn`` (a step's generated function) run eagerly once, then captured and replayed as a CUDA graph."""

    def __init__(self, fn: Callable, xp, names: Sequence[str]):
        self.fn, self.xp, self.names = fn, xp, tuple(names)
        self.calls = 0
        self.graph = None
        self.pool = None
        self.static: list = []
        self.outputs: tuple = ()

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self, *args):
        self.calls += 1
        if self.calls == 1:                  # warm-up: every kernel compiled and loaded before the capture
            return self.fn(*args)
        if self.graph is None:
            self._capture(args)
        else:
            self._copy_in(args)
        self.graph.launch(stream=self.xp.cuda.get_current_stream())
        return self.outputs

    def _capture(self, args: Sequence) -> None:
        xp = self.xp
        self.pool = xp.cuda.MemoryPool()
        with xp.cuda.using_allocator(self.pool.malloc):
            self.static = [xp.array(a, copy=True) for a in args]      # on the current stream, before capture
            xp.cuda.get_current_stream().synchronize()
            stream = xp.cuda.Stream(non_blocking=True)
            with stream:
                stream.begin_capture()
                try:
                    outputs = self.fn(*self.static)
                finally:
                    graph = stream.end_capture()
        self.graph, self.outputs = graph, tuple(outputs)
        xp.get_default_memory_pool().free_all_blocks()      # the warm-up's intermediates: the graph has its own

    def _copy_in(self, args: Sequence) -> None:
        for name, a, s in zip(self.names, args, self.static):
            if a is s:
                continue
            if a.shape != s.shape or a.dtype != s.dtype:
                raise ValueError(f"graph step: argument {name} has shape {a.shape} {a.dtype}, but the graph was "
                                 f"captured for {s.shape} {s.dtype}")
            s[...] = a
