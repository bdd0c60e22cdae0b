"""Progress of a loop: a tqdm bar on a terminal, plain periodic lines otherwise.

When standard output is not a terminal (a log file, a pipe, CI), a bar's
carriage returns make unreadable logs, so :func:`progress` prints one plain
line every tenth of the total (and at least every 30 s), and a last one at
the end::

    train iris [float32]: 90/900 steps, loss 0.4123, 0.3 s

Use it like tqdm::

    with progress(total, "train iris [float32]") as bar:
        for ...:
            bar.update()
        bar.set_postfix(loss=f"{loss:.4f}")
"""
from __future__ import annotations

import math
import sys
import time
from typing import Protocol, TextIO

__all__ = ["Progress", "progress", "Counter"]


class Counter(Protocol):
    """What a long computation reports its progress to: a :class:`Progress`, or a tqdm bar."""

    def update(self, n: int = 1) -> object: ...


class Progress:
    """A step counter that reports as a tqdm bar (``tty=True``) or as plain periodic lines."""

    def __init__(self, total: int, desc: str, unit: str = "step", disable: bool = False,
                 file: TextIO | None = None, tty: bool | None = None, every: float = 0.1,
                 seconds: float = 30.0) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.file = file if file is not None else sys.stdout
        self.n = 0
        self.postfix: dict[str, object] = {}
        self.disable = disable
        if tty is None:
            tty = bool(getattr(self.file, "isatty", lambda: False)())
        self._bar = None
        if tty and not disable:
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, unit=unit)
        self._every = max(1, math.ceil(total * every))
        self._seconds = seconds
        self._printed = 0
        self._t0 = self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps (a line when a tenth of the total or ``seconds`` have passed)."""
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif not self.disable and (self.n // self._every > self._printed // self._every
                                   or time.monotonic() - self._last >= self._seconds):
            self._line()

    def set_postfix(self, **values: object) -> None:
        """Values shown after the count (``loss=0.41``), on the bar or on the next line."""
        self.postfix.update(values)
        if self._bar is not None:
            self._bar.set_postfix(**values)

    def close(self) -> None:
        """Close the bar, or print the last line if the last count was not printed yet."""
        if self._bar is not None:
            self._bar.close()
        elif not self.disable and self.n != self._printed:
            self._line()

    def _line(self) -> None:
        now = time.monotonic()
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        print(f"{self.desc}: {self.n}/{self.total} {self.unit}s{extra}, {now - self._t0:.1f} s",
              file=self.file, flush=True)
        self._printed, self._last = self.n, now

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int, desc: str, unit: str = "step", disable: bool = False,
             file: TextIO | None = None) -> Progress:
    """A tqdm bar if ``file`` (default: standard output) is a terminal, else plain periodic lines on it.

    ``disable=True`` (``--quiet``) shows nothing.  The bar itself is drawn by
    tqdm on standard error, as tqdm does by default.
    """
    return Progress(total, desc, unit, disable=disable, file=file)
