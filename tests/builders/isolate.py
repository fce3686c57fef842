"""Run one hostile-input case in its own process, with a timeout.

A case may hang (a loop that never ends), exhaust memory or crash the process (a driver fault);
none of that may take the test session down with it. Each case is a module-level function run
in a child process forked from a forkserver that has already imported onyxia, onnx, numpy and
onnxruntime (but never touched the GPU), so a case starts in milliseconds rather than the second
a fresh interpreter needs. The child reports what the function returned or raised; the parent
kills it after `timeout` seconds.
"""

from __future__ import annotations

import multiprocessing
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

# Imported by the forkserver once; children inherit them. Nothing here may create a wgpu
# device: a GPU context does not survive fork.
PRELOAD = ["numpy", "onnx", "onnx.reference", "onnxruntime", "onyxia", "onyxia.compiler",
           "onyxia.operators", "onyxia.runtime", "tests.builders.isolate"]
DEFAULT_TIMEOUT = 60.0

_context: multiprocessing.context.BaseContext | None = None


def _ctx() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


@dataclass
class Outcome:
    """What a case did: returned `value`, or raised `error` (class name) with `message`."""

    value: Any = None
    error: str | None = None
    mro: tuple[str, ...] = ()  # qualified names of the exception's classes
    message: str = ""
    traceback: str = ""
    timed_out: bool = False
    exitcode: int | None = 0
    extra: dict = field(default_factory=dict)

    def describe(self) -> str:
        if self.timed_out:
            return "timed out"
        if self.exitcode not in (0, None) and self.error is None:
            return f"the process died (exit code {self.exitcode})"
        if self.error:
            return f"raised {self.error}: {self.message}\n{self.traceback}"
        return f"returned {self.value!r}"[:2000]


def _child(fn: Callable, args: tuple, kwargs: dict, conn) -> None:
    try:
        value = fn(*args, **kwargs)
        conn.send(Outcome(value=value))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which judges it
        mro = tuple(f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__)
        conn.send(Outcome(error=type(exc).__name__, mro=mro, message=str(exc),
                          traceback=traceback.format_exc()))
    finally:
        conn.close()


def isolated(fn: Callable, *args: Any, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> Outcome:
    """Run fn(*args, **kwargs) in a child process; return its Outcome (never raises for it)."""
    ctx = _ctx()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, args, kwargs, child), daemon=True)
    proc.start()
    child.close()
    outcome: Outcome | None = None
    if parent.poll(timeout):
        try:
            outcome = parent.recv()
        except EOFError:  # the child died before reporting
            outcome = None
    proc.join(5 if outcome is not None else 0.1)
    if proc.is_alive():
        proc.kill()
        proc.join()
        if outcome is None:
            return Outcome(timed_out=True, exitcode=None)
    if outcome is None:
        return Outcome(exitcode=proc.exitcode)
    outcome.exitcode = proc.exitcode
    return outcome


def expect_error(fn: Callable, *args: Any, error: type[BaseException], match: str,
                 timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> Outcome:
    """Assert fn raises `error` (or a subclass) with a message matching `match` (re.search).

    The message must not be a raw Python exception wrapped as text: the error names the model
    element and what was expected, not "TypeError: ...".
    """
    outcome = isolated(fn, *args, timeout=timeout, **kwargs)
    wanted = f"{error.__module__}.{error.__qualname__}"
    assert outcome.error is not None and wanted in outcome.mro, \
        f"expected {error.__name__} matching {match!r}; the case {outcome.describe()}"
    assert re.search(match, outcome.message), \
        f"{error.__name__} message {outcome.message!r} does not match {match!r}"
    assert not re.search(r"\b(TypeError|KeyError|IndexError|AttributeError|RecursionError):",
                         outcome.message), f"the message wraps a raw Python error: {outcome.message!r}"
    return outcome


def expect_value(fn: Callable, *args: Any, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> Any:
    """Assert fn returns (no exception, no timeout, no crash); give back what it returned."""
    outcome = isolated(fn, *args, timeout=timeout, **kwargs)
    assert outcome.error is None and not outcome.timed_out and outcome.exitcode == 0, \
        f"expected a result; the case {outcome.describe()}"
    return outcome.value
