"""From a model file to a loaded executor, timed: the load report, the plan cache, progress.

`LoadReport` splits a load into parse (the ONNX file read into IR), the compiler's stages (from
CompilerPipeline.history), the plan cache's read or write, and the runtime's setup
(runtime/replay.py LoadTimes: buffers and weight uploads, WGSL render, shader modules,
pipelines), plus the first run. InferenceSession keeps one as `load_report`; `onyxia run` and
`onyxia bench` print it.

Measured on lavapipe (2 cores): the driver's pipeline compile dominates a load (~20 ms a
pipeline); the compiler takes 0.03-0.1 s on the test models, parse under 0.03 s.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, TextIO

from onyxia.compiler import CompilerPipeline
from onyxia.compiler.pipeline import PassRecord
from onyxia.onnx import load_model
from onyxia.operators import core_operator_registry
from onyxia.plan import CompiledModel
from onyxia.plan_cache import PlanCache, enabled_by_env, plan_key
from onyxia.runtime import Runtime
from onyxia.runtime.replay import LoadTimes


@dataclass
class LoadReport:
    """Where a load's time went (seconds). `cache`: "hit", "miss" (compiled, then stored),
    "off" (not used: disabled, or a model source or registry the cache does not key), or
    "plan" (a plan file was loaded: no compiler)."""

    parse_s: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # compiler stage -> seconds ("planning" last)
    cache: str = "off"
    cache_s: float = 0.0  # hashing the model, reading the entry (or plan file), writing it after a compile
    # (a session writes it on a thread: PlanCache.put_later)
    device_s: float = 0.0  # opening the adapter's device (Runtime())
    runtime: LoadTimes = field(default_factory=LoadTimes)
    first_run_s: float | None = None

    @property
    def compile_s(self) -> float:
        return sum(self.stages.values())

    @property
    def total_s(self) -> float:
        """Parse, compile, cache and runtime setup (the first run not included)."""
        return self.parse_s + self.compile_s + self.cache_s + self.device_s + self.runtime.total_s

    def rows(self) -> list[tuple[str, float]]:
        rt = self.runtime
        other = rt.total_s - rt.buffers_s - rt.render_s - rt.shader_modules_s - rt.pipelines_s
        # The first load in a process also pays wgpu-py's one-time setup of its C types
        # (~0.5 s, in "runtime other" and the first run).
        rows = [("parse", self.parse_s), *((f"compile: {k}", v) for k, v in self.stages.items()),
                (f"plan cache ({self.cache})", self.cache_s), ("device", self.device_s),
                ("buffers + weight upload", rt.buffers_s),
                ("WGSL render", rt.render_s), ("shader modules", rt.shader_modules_s),
                ("pipelines", rt.pipelines_s),
                ("runtime other", max(other, 0.0))]
        if self.first_run_s is not None:
            rows.append(("first run", self.first_run_s))
        return rows

    def lines(self) -> list[str]:
        """A table: one row per part, then the pipeline counts."""
        rt = self.runtime
        out = [f"{name:<28} {seconds * 1e3:10.1f} ms" for name, seconds in self.rows()]
        out.append(f"{'total (first run aside)':<28} {self.total_s * 1e3:10.1f} ms")
        out.append(f"pipelines: {rt.pipelines} built, {rt.shared} shared by identical shaders, {rt.deferred} "
                   "deferred (alternatives not replayed now)")
        if rt.quick:
            out.append(f"quick first run: {rt.quick} kernel choices replay a variant that compiles faster until "
                       "helper threads have compiled them")
        return out

    def line(self) -> str:
        """One line: the total and its main parts."""
        rt = self.runtime
        return (f"loaded in {self.total_s * 1e3:.0f} ms: parse {self.parse_s * 1e3:.0f}, compile "
                f"{self.compile_s * 1e3:.0f}, plan cache {self.cache} {self.cache_s * 1e3:.0f}, pipelines "
                f"{(rt.render_s + rt.shader_modules_s + rt.pipelines_s) * 1e3:.0f} ({rt.pipelines} built, "
                f"{rt.deferred} deferred), buffers {rt.buffers_s * 1e3:.0f} ms")


def stage_times(history: Iterable[PassRecord]) -> dict[str, float]:
    """Seconds per compiler stage (the lowering as "planning")."""
    out: dict[str, float] = {}
    for record in history:
        name = record.stage.name.lower()
        out[name] = out.get(name, 0.0) + record.seconds
    return out


def compiler_signature(pipeline: CompilerPipeline) -> list[str]:
    """What of the compiler a plan depends on beyond onyxia's source: its passes and options."""
    return [f"{p.stage.name}:{p.name or type(p).__name__}" for p in pipeline.passes] + [
        f"memory_order={pipeline.memory_order}"]


def cache_for(setting: bool | str | os.PathLike | PlanCache | None) -> PlanCache | None:
    """The plan cache a `plan_cache=` argument asks for: None/True: the default one unless
    ONYXIA_PLAN_CACHE=0; False: none; a path or PlanCache: that one."""
    if isinstance(setting, PlanCache):
        return setting
    if setting is False or (setting in (None, True) and not enabled_by_env()):
        return None
    return PlanCache(None if setting in (None, True) else setting)  # type: ignore[arg-type]


def cached_compile(cache: PlanCache | None, key: str | None, report: LoadReport,
                   compile_fn: Callable[[], tuple[CompiledModel, dict[str, float]]],
                   write_later: bool = False) -> CompiledModel:
    """The plan under `key` in `cache`, else `compile_fn()`'s (stored there; on a thread with
    `write_later`, PlanCache.put_later); `report` says which."""
    if cache is None or key is None:
        report.cache = "off"
        model, report.stages = compile_fn()
        return model
    start = time.perf_counter()
    model = cache.get(key)
    report.cache_s += time.perf_counter() - start
    if model is not None:
        report.cache, report.stages = "hit", {}
        return model
    model, report.stages = compile_fn()
    start = time.perf_counter()
    (cache.put_later if write_later else cache.put)(key, model)
    report.cache, report.cache_s = "miss", report.cache_s + time.perf_counter() - start
    return model


def compile_file(source: Any, dims: Mapping[str, int], static: Iterable[str] = (), *,
                 plan_cache: bool | str | os.PathLike | PlanCache | None = None,
                 progress: Callable[[int, int], None] | None = None) -> tuple[CompiledModel, LoadReport]:
    """Compile a model (path or bytes) with the core operators and default passes, through the
    plan cache; the load report has parse, compile and cache filled in."""
    report = LoadReport()
    cache = cache_for(plan_cache)
    static = tuple(static)
    pipeline = CompilerPipeline(core_operator_registry())
    start = time.perf_counter()
    digest = cache.digest(source) if cache is not None else None
    key = plan_key(digest, dims, static, compiler_signature(pipeline)) if digest is not None else None
    report.cache_s = time.perf_counter() - start  # hashing the model is the cache's cost too

    def compile_fn() -> tuple[CompiledModel, dict[str, float]]:
        begin = time.perf_counter()
        graph = load_model(source)
        report.parse_s = time.perf_counter() - begin
        model = pipeline.compile(graph, dims, static,
                                 progress=None if progress is None else lambda rec, done, total: progress(done, total))
        return model, stage_times(pipeline.history)

    return cached_compile(cache, key, report, compile_fn), report


def load_executor(source: str, dims: Mapping[str, int], static: Iterable[str] = (), *, adapter: Any = None,
                  plan_cache: bool | str | os.PathLike | PlanCache | None = None,
                  progress: DelayedProgress | None = None) -> tuple[CompiledModel, Any, Any, LoadReport]:
    """(plan, Runtime, executor, load report) of a model file or a plan file (.onyxia), for
    `onyxia run` and `bench`. A plan file starts at its compile-time dims, moved to `dims`."""
    if str(source).endswith(".onyxia") or is_plan_file(source):
        report = LoadReport(cache="plan")
        start = time.perf_counter()
        compiled = CompiledModel.load(source)
        report.cache_s = time.perf_counter() - start
    else:
        compiled, report = compile_file(source, dims, static, plan_cache=plan_cache,
                                        progress=progress.stage("compiling") if progress else None)
    start = time.perf_counter()
    runtime = Runtime(adapter=adapter)
    report.device_s = time.perf_counter() - start
    exe = runtime.load_model(compiled, progress=progress.stage("pipelines") if progress else None,
                             compile_ahead=report.cache != "hit")  # a cached plan's kernels: in the driver's cache
    report.runtime = replace(exe.stats.load)  # as loaded: later runs build more (alternatives)
    if report.cache == "plan" and dims:
        exe.update_dimensions(dims)
    if progress is not None:
        progress.close()
    return compiled, runtime, exe, report


def is_plan_file(path: str) -> bool:
    """Whether `path` is a zip (a plan file), not an ONNX protobuf."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PK\x03\x04"
    except OSError:
        return False


class DelayedProgress:
    """A progress line on stderr for work past `delay_s` seconds, only when stderr is a terminal:
    `progress(done, total)` redraws it, `close()` clears it. Quick loads print nothing."""

    def __init__(self, label: str, delay_s: float = 1.0, stream: TextIO | None = None) -> None:
        self.label = label
        self.delay_s = delay_s
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.drawn = False

    def stage(self, label: str) -> Callable[[int, int], None]:
        """A callback drawing `label`'s progress on the same line (the clock keeps running)."""
        return lambda done, total: self(done, total, label)

    def __call__(self, done: int, total: int, label: str | None = None) -> None:
        if total <= 0 or time.perf_counter() - self.start < self.delay_s or not self.stream.isatty():
            return
        width = 28
        filled = width * min(done, total) // total
        elapsed = time.perf_counter() - self.start
        self.stream.write(f"\r{label or self.label:<14} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} {elapsed:5.1f} s")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()
            self.drawn = False


__all__ = ["DelayedProgress", "LoadReport", "cache_for", "cached_compile", "compile_file", "compiler_signature",
           "is_plan_file", "load_executor", "stage_times"]
