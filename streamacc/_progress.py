"""The progress bar: steps done of total, steps/s, MB/s of output, ETA, on stderr."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

__all__ = ["Progress"]


def _is_terminal(stream: object) -> bool:
    """Whether ``stream`` is a terminal; False for None (no stderr at all), closed or odd streams."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """A tqdm bar over steps that also shows output throughput; silent when disabled.

    It shows only when asked for and stderr is a terminal, so logs and pipes stay clean.
    """

    def __init__(self, total: int, *, initial: int = 0, enabled: bool = True, label: str = "") -> None:
        self.enabled = enabled and _is_terminal(sys.stderr)
        self._bytes = 0
        self._t0 = time.perf_counter()
        self._bar = None
        if self.enabled:
            self._bar = tqdm(
                total=total, initial=initial, desc=label, unit="step", unit_scale=True, file=sys.stderr, leave=True
            )

    def update(self, steps: int, nbytes: int) -> None:
        if self._bar is None:
            return
        self._bytes += nbytes
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        self._bar.set_postfix_str(f"{self._bytes / elapsed / 1e6:.0f} MB/s", refresh=False)
        self._bar.update(steps)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
