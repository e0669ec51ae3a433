"""The progress bar, drawn on a fake terminal with a fake clock: what it says, that its rates
agree with each other, and that it fits 80 columns with a bar still worth the name."""

from __future__ import annotations

import io
import sys
import time

from streamacc.run import MIN_BAR, Progress, Rates, clock, si

LONG = "/data/experiments/2026/geometric-progressions/runs/very-long-directory-name/out.zarr"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def fake_terminal(monkeypatch) -> tuple[Terminal, list[float]]:
    """Make stderr a terminal, with a clock that moves only when the test says so.

    Called from the test itself, not a fixture: pytest sets sys.stderr again after fixtures.
    """
    now = [1000.0]
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    return stream, now


def lines(stream: Terminal) -> list[str]:
    """What the terminal shows, one entry per redraw."""
    return [line for line in stream.getvalue().replace("\n", "\r").split("\r") if line.strip()]


def run_bar(monkeypatch, columns: int, *, stored: bool = True, label: str = LONG) -> str:
    stream, now = fake_terminal(monkeypatch)
    monkeypatch.setenv("COLUMNS", str(columns))
    with Progress(2**32, initial=0, label=label) as bar:
        for _ in range(300):
            now[0] += 0.5
            bar.update(2**22, 2**25, stored=2**23 if stored else None)
    return lines(stream)[-1]


def the_bar(line: str) -> str:
    return line.split("|")[1]


def test_si_and_clock():
    assert [si(v) for v in (0, 7, 999, 1000, 1070, 4.29e9, 2**32, 105e6)] == [
        "0", "7", "999", "1k", "1.07k", "4.29G", "4.29G", "105M",
    ]  # fmt: skip
    assert [clock(s) for s in (0, 59.9, 61, 3600 + 62)] == ["00:00", "00:59", "01:01", "1:01:02"]


def test_at_80_columns_a_long_label_leaves_the_bar_its_room(monkeypatch):
    line = run_bar(monkeypatch, 80)
    assert len(line) <= 80
    assert len(the_bar(line)) >= MIN_BAR
    assert line.startswith("...") and "out.zarr" in line  # the end of the path, where its name is
    assert "1.26G/4.29G steps" in line  # counted in steps, not "1.26G" that reads as bytes
    assert "8.39M steps/s" in line


def test_a_wide_terminal_shows_every_rate(monkeypatch):
    line = run_bar(monkeypatch, 140)
    assert len(line) <= 140 and len(the_bar(line)) >= MIN_BAR
    assert "1.26G/4.29G steps [02:30<06:02, 8.39M steps/s, 67.1MB/s, 16.8MB/s stored]" in line


def test_without_stored_bytes_the_bar_shows_output_only(monkeypatch):
    line = run_bar(monkeypatch, 140, stored=False)
    assert "8.39M steps/s, 67.1MB/s]" in line and "stored" not in line


def test_update_keeps_its_two_argument_form(monkeypatch):
    stream, now = fake_terminal(monkeypatch)
    with Progress(100, initial=0, label="out.zarr") as bar:
        now[0] += 1.0
        bar.update(10, 80)
        now[0] += 1.0
        bar.update(10, 80)
    assert "20/100 steps" in lines(stream)[-1] and "10 steps/s, 80B/s]" in lines(stream)[-1]


def test_silent_when_stderr_is_not_a_terminal(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with Progress(100, initial=0, label="out.zarr") as bar:
        bar.update(10, 80, stored=40)
    assert not bar.enabled and stream.getvalue() == ""


def test_rates_share_one_window_so_they_agree():
    # 8 bytes of output and 2 stored per step: slow for a minute, then 10x faster
    rates = Rates(0.0, 0, window=10.0)
    steps = 0
    for t in range(1, 61):
        steps += 100
        rates.add(float(t), steps, 8 * steps, 2 * steps)
    for t in range(61, 81):
        steps += 1000
        rates.add(float(t), steps, 8 * steps, 2 * steps)
    per_step, output, stored = rates.per_second()
    assert per_step == 1000.0  # the last ten seconds only, not the since-start average
    assert output == 8 * per_step and stored == 2 * per_step


def test_rates_before_any_progress():
    rates = Rates(5.0, 100)
    assert rates.per_second() is None
    rates.add(5.0, 100, 0, 0)
    assert rates.per_second() is None
