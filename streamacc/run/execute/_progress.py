"""The progress bar on stderr: steps done of total, ETA, and rates of steps, output and stored bytes.

Every rate on the bar is measured over the same recent window (:class:`Rates`), so steps/s
and MB/s agree with each other; the text is fitted to the terminal so that the bar itself
keeps a useful width at 80 columns.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from typing import Any, TextIO

__all__ = ["Progress", "Rates", "clock", "si"]

WINDOW = 10.0
"""Seconds of recent progress that the rates and the ETA average over."""

MIN_BAR = 12
"""Columns the bar itself keeps; the text around it is shortened first."""


def si(value: float) -> str:
    """``value`` with three significant digits and an SI prefix: 999, 1.07k, 105M, 4.29G."""
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(value) < 999.5:
            return f"{value:.3g}{prefix}" if prefix else f"{value:.3g}"
        value /= 1000
    return f"{value * 1000:.3g}E"


def clock(seconds: float) -> str:
    """``seconds`` as ``mm:ss`` or ``h:mm:ss``."""
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal; False for None (no stderr at all), closed or odd streams."""
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _columns(stream: Any) -> int:
    """The terminal's width: $COLUMNS if set, else the stream's terminal, else 80."""
    try:
        return max(int(os.environ["COLUMNS"]), 20)
    except (KeyError, ValueError):
        pass
    try:
        return max(os.get_terminal_size(stream.fileno()).columns, 20)
    except (AttributeError, ValueError, OSError):
        return 80


def shorten(label: str, width: int) -> str:
    """``label`` cut to ``width`` characters, keeping its end (a path's file name): '.../runs/out.zarr'."""
    return label if len(label) <= width else "..." + label[len(label) - width + 3 :]


def _literal(text: str) -> str:
    """``text`` escaped for a format string."""
    return text.replace("{", "{{").replace("}", "}}")


class Rates:
    """Steps, output bytes and stored bytes per second, all over the same last ``window`` seconds."""

    def __init__(self, now: float, steps: int, window: float = WINDOW) -> None:
        self.window = window
        self.samples: deque[tuple[float, int, int, int]] = deque([(now, steps, 0, 0)])

    def add(self, now: float, steps: int, nbytes: int, stored: int) -> None:
        """Record the totals so far (steps done, output bytes and stored bytes) at time ``now``."""
        self.samples.append((now, steps, nbytes, stored))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def per_second(self) -> tuple[float, float, float] | None:
        """``(steps/s, output bytes/s, stored bytes/s)`` over the window, None before any progress."""
        (t0, s0, b0, k0), (t1, s1, b1, k1) = self.samples[0], self.samples[-1]
        if t1 <= t0 or s1 == s0:
            return None
        span = t1 - t0
        return (s1 - s0) / span, (b1 - b0) / span, (k1 - k0) / span


class Progress:
    """A bar over steps that also shows output and stored throughput; silent when disabled.

    It shows only when asked for and stderr is a terminal, so logs and pipes stay clean.
    A bar made before the work starts shows once :meth:`begin` says where it starts (a
    resumed run, from the steps already committed); with ``initial`` it shows at once.
    """

    def __init__(self, total: int, *, initial: int | None = None, enabled: bool = True, label: str = "") -> None:
        self.enabled = enabled and _is_terminal(sys.stderr)
        self.total, self.label = total, label
        self.done = 0
        self._bytes = 0
        self._stored: int | None = None
        self._t0 = time.perf_counter()
        self._rates = Rates(self._t0, 0)
        self._bar: Any = None
        if initial is not None:
            self.begin(initial)

    def begin(self, initial: int) -> None:
        """Start counting at ``initial`` steps done (and show the bar, when enabled)."""
        self.done = initial
        self._t0 = time.perf_counter()
        self._rates = Rates(self._t0, initial)
        if self.enabled and self._bar is None:
            from tqdm.auto import tqdm

            width = _columns(sys.stderr)
            self._bar = tqdm(
                total=self.total, initial=initial, file=sys.stderr, leave=True, ncols=width,
                bar_format=self.text(width),
            )  # fmt: skip

    def update(self, steps: int, nbytes: int, stored: int | None = None) -> None:
        """Count ``steps`` more steps, ``nbytes`` more bytes of output and ``stored`` bytes stored for them."""
        self.done += steps
        self._bytes += nbytes
        if stored is not None:
            self._stored = (self._stored or 0) + stored
        self._rates.add(time.perf_counter(), self.done, self._bytes, self._stored or 0)
        if self._bar is not None:
            width = _columns(sys.stderr)
            self._bar.ncols = width
            self._bar.bar_format = self.text(width)
            self._bar.update(steps)

    def text(self, width: int) -> str:
        """The bar's line as a tqdm ``bar_format`` (only ``{bar}`` is left to tqdm), fitted to ``width``.

        The fullest of these that leaves the bar ``MIN_BAR`` columns is shown: all rates
        with elapsed time and ETA, then without the elapsed time, without the output rate
        (steps/s times the bytes per step), without the stored rate, and the ETA alone.
        """
        elapsed = clock(time.perf_counter() - self._t0)
        rates = self._rates.per_second()
        if rates is None:
            candidates = [[elapsed], []]
        else:
            steps, output, stored = rates
            eta = "<" + clock((self.total - self.done) / steps)
            speed, out = f"{si(steps)} steps/s", f"{si(output)}B/s"
            kept = [] if self._stored is None else [f"{si(stored)}B/s stored"]
            candidates = [
                [elapsed + eta, speed, out, *kept],
                [eta, speed, out, *kept],
                [elapsed + eta, speed, *kept],
                [eta, speed, *kept],
                [eta, speed],
                [eta],
            ]
        label = shorten(self.label, max(10, width // 5))
        percent = 100 * self.done / self.total if self.total else 100.0
        head = f"{label}: {percent:3.0f}%|" if label else f"{percent:3.0f}%|"
        counts = f"| {si(self.done)}/{si(self.total)} steps"
        for items in candidates:
            tail = f"{counts} [{', '.join(items)}]" if items else counts
            if len(head) + len(tail) + MIN_BAR <= width:
                break
        return _literal(head) + "{bar}" + _literal(tail)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
