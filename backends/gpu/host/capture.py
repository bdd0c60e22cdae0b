"""Streams, stream capture and CUDA graphs of the host execution mode's CuPy stand-in (:mod:`~.run`).

A device records, rather than runs, the work issued to a capturing stream; ``graph.launch()`` then runs the
recorded work on the same buffers. The stand-in does the same:

* while a stream captures, a kernel launch (:class:`~.launch.RawKernel`) is appended to the capture and
  not run, and so is every array operation of the stand-in that writes memory: one that makes a new array
  runs at once (for its shape; its values are junk, as a device's would be unread) and is recorded to
  recompute into that same array; one that writes in place (``out=``, ``copyto``, ``a[...] = b``, ``+=``)
  is only recorded; a view records nothing;
* reads of device memory by the host (``.get()``, ``float(a)``, …), host-to-device copies and
  ``synchronize`` raise, as CuPy and the driver refuse them during a capture;
* :meth:`Graph.launch` runs the recorded list in order.

So a step that needs anything the capture did not record (a value computed on the host, a buffer allocated
per call) replays wrongly here as on a device. Memory pools and allocators are accepted and do nothing: host
memory is never reused while referenced.
"""
from __future__ import annotations

import contextlib
from typing import Callable

from .launch import launch_state

__all__ = ["capturing", "record", "refuse", "Stream", "Graph", "MemoryPool", "Event", "using_allocator",
           "get_current_stream", "INPLACE"]

#: functions and methods that write into an array they are given (recorded, not run, during a capture)
INPLACE = frozenset({"copyto", "fill", "put", "sort", "partition", "itemset", "__setitem__"})


def capturing() -> list | None:
    """The list the current capture records into, or ``None``."""
    return getattr(launch_state, "capture", None)


def refuse(what: str) -> None:
    """Raise as CuPy does for work a capturing stream cannot take (a synchronous copy or read)."""
    if capturing() is not None:
        raise RuntimeError(f"the current stream is capturing, so {what} is not permitted (cudaErrorStreamCapture"
                           f"Unsupported): nothing may wait for or read the device during a capture")


def record(work: Callable[[], object]) -> None:
    """Append ``work`` to the current capture."""
    capturing().append(work)


class Event:
    def __init__(self, *args, **kwargs):
        self.ptr = 0

    def record(self, stream=None) -> None:
        return None

    def synchronize(self) -> None:
        refuse("Event.synchronize")


class Graph:
    """The work recorded while a stream captured; :meth:`launch` runs it."""

    def __init__(self, work: list):
        self.work = work

    def launch(self, stream=None) -> None:
        if capturing() is not None:
            raise RuntimeError("Graph.launch during a capture: the stand-in does not nest graphs")
        for w in self.work:
            w()

    def upload(self, stream=None) -> None:
        return None


class Stream:
    """``cupy.cuda.Stream``: ``with stream:`` makes it current; ``begin_capture``/``end_capture`` record work."""
    _current: list = []

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False, priority=None):
        self.ptr = 0 if null else id(self)
        self.capture: list | None = None

    def __enter__(self) -> "Stream":
        Stream._current.append(self)
        return self

    def __exit__(self, *exc) -> bool:
        Stream._current.pop()
        return False

    def begin_capture(self, mode=None) -> None:
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if capturing() is not None:
            raise RuntimeError("a stream is capturing already")
        self.capture = launch_state.capture = []

    def end_capture(self) -> Graph:
        if self.capture is None:
            raise RuntimeError("end_capture without begin_capture")
        work, self.capture, launch_state.capture = self.capture, None, None
        return Graph(work)

    def is_capturing(self) -> bool:
        return self.capture is not None

    def synchronize(self) -> None:
        refuse("Stream.synchronize")

    def record(self, event: Event | None = None) -> Event:
        return event or Event()

    def wait_event(self, event: Event) -> None:
        return None


Stream.null = Stream(null=True)


def get_current_stream() -> Stream:
    return Stream._current[-1] if Stream._current else Stream.null


class MemoryPool:
    """``cupy.cuda.MemoryPool``: host memory is freed when unreferenced, so the pool holds nothing."""

    def malloc(self, size: int):
        return None

    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0

    def free_all_blocks(self, stream=None) -> None:
        return None


@contextlib.contextmanager
def using_allocator(allocator=None):
    yield
