"""`onyxia generate`'s setup progress: drawn on a terminal once a phase runs past the delay, never
on a pipe, and erased when the phase ends."""

from __future__ import annotations

import io
import time

from onyxia.llm.cli import TerminalProgress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_draws_after_the_delay_and_clears():
    out = Tty()
    progress = TerminalProgress(out, delay=0.05, interval=0.01)
    progress("compiling", 0, 4)
    assert out.getvalue() == ""  # not yet a slow phase
    time.sleep(0.1)  # the ticker draws a phase that has no steps to report
    progress("compiling", 2, 4)
    drawn = out.getvalue()
    assert "compiling" in drawn and "2/4" in drawn and " s" in drawn
    progress("compiling", 4, 4)
    progress.close()
    assert out.getvalue().endswith("\r\033[K")


def test_single_step_phase_shows_elapsed_time_from_the_ticker():
    out = Tty()
    progress = TerminalProgress(out, delay=0.02, interval=0.01)
    progress("uploading weights", 0, 1)
    time.sleep(0.1)
    progress.close()
    assert "uploading weights" in out.getvalue()


def test_silent_on_a_pipe():
    out = io.StringIO()
    progress = TerminalProgress(out, delay=0.0)
    progress("reading model", 0, 1)
    progress.close()
    assert out.getvalue() == ""
