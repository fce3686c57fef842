"""InferenceSession: onnxruntime's API on top of the compiler and the PlanExecutor.

It compiles models and runs them, so it sits above both the compiler and runtime/.

Symbols are bound from the feed shapes on every call. The first call compiles (with the
default optimizing pipeline); later calls with other shapes only update dimensions, which
patches the plan in place instead of recompiling.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from onyxia.compiler import CompilerPipeline, Stage
from onyxia.compiler.passes.resolution import RESERVED_PREFIX, input_symbols, unknown_dimension
from onyxia.errors import InputError, ShapeInferenceError, ValueRequiredError
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind
from onyxia.ir.shapes import Dim, SymDim
from onyxia.loading import DelayedProgress, LoadReport, cache_for, cached_compile, compiler_signature, stage_times
from onyxia.onnx import load_model
from onyxia.operators import core_operator_registry
from onyxia.plan import CompiledModel
from onyxia.plan.show import literal_uses
from onyxia.plan_cache import PlanCache, plan_key
from onyxia.runtime.device import Runtime
from onyxia.session_containers import assemble, elements, feed_structure, flatten, leaves


@dataclass(frozen=True)
class NodeArg:
    """Like onnxruntime.NodeArg: name, type ("tensor(float)") and shape (ints and symbol names)."""

    name: str
    type: str
    shape: list[int | str]


_ORT_TYPE = {"float32": "float", "float64": "double"}


def _node_arg(name: str, dtype: str, shape: Sequence[Dim]) -> NodeArg:
    return NodeArg(name, f"tensor({_ORT_TYPE.get(dtype, dtype)})", [d if isinstance(d, int) else str(d) for d in shape])


def bind_dims(shapes: Mapping[str, Sequence[Dim]], feeds: Mapping[str, Any]) -> dict[str, int]:
    """Symbol values implied by feed shapes (only dims that are a bare symbol bind it)."""
    dims: dict[str, int] = {}
    for name, shape in shapes.items():
        if name not in feeds:
            continue
        actual = np.shape(feeds[name]) if not hasattr(feeds[name], "buffer") else feeds[name].shape
        if len(actual) != len(shape):
            raise InputError(f"input '{name}' has rank {len(actual)}, expected {len(shape)} "
                             f"(shape {[str(d) for d in shape]})")
        for axis, (d, value) in enumerate(zip(shape, actual)):
            if isinstance(d, SymDim) and len(d.symbols) == 1 and str(d) == next(iter(d.symbols)):
                sym = str(d)
                if dims.setdefault(sym, int(value)) != int(value):
                    raise InputError(f"input '{name}' dim {axis} is {value}, but '{sym}' is already {dims[sym]} "
                                     "from another input")
    return dims


@dataclass(frozen=True)
class Recompile:
    """Why a run compiled another plan: `symbol` (or a graph input, whose values are baked in)
    changed from `old` to `new`, and node `node` needs it as a concrete number (`reason`)."""

    symbol: str
    node: str
    reason: str
    old: Any
    new: Any


@dataclass
class SessionStats:
    """What the session did; tests assert on it."""

    compiles: int = 0  # plans compiled: the first run's, then one per new specialization
    # Each plan compiled after the first, with every value that needed it (one entry per
    # symbol or input); a shape that only updates dimensions adds nothing.
    recompiles: list[Recompile] = field(default_factory=list)


_MAX_SPECIALIZATIONS = 8  # executors kept per session for different baked input values


def _graph_input_sources(graph, tensor: str) -> set[str]:
    """The graph inputs `tensor` is computed from (itself, if it is one), through subgraphs: a
    tensor of an If branch or a loop body is computed from what its nodes read."""
    producers = {out: node for g in (graph, *graph.all_subgraphs()) for node in g.nodes for out in node.outputs}
    seen, stack, found = set(), [tensor], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph.inputs:
            found.add(name)
            continue
        node = producers.get(name)
        if node is not None:
            stack.extend(t for t in (*node.inputs, *node.implicit_inputs) if t is not None)
    return found


class InferenceSession:
    """onnxruntime-compatible session: `run(output_names or None, feeds) -> list[np.ndarray]`.

    `model` is a path, bytes, ModelProto, IrGraph or CompiledModel. `dims` pins symbols that
    feeds cannot reveal (e.g. a symbol used only inside an expression); `static` names
    symbols to bake into shaders.

    `plan_cache`: compiled plans of a model file (or bytes) are kept on disk and reused by the
    next process (onyxia/plan_cache.py): None/True uses the default cache unless
    ONYXIA_PLAN_CACHE=0, False none, a folder that one. Not with a custom `registry`.
    `load_report` (onyxia/loading.py LoadReport) splits the latest load's time.

    `progress`: a load (compile and pipelines) taking over a second draws a progress line on
    stderr when it is a terminal (None, the default); False draws none; a DelayedProgress
    draws that one.
    """

    def __init__(self, model: Any, sess_options: Any = None, providers: Any = None, *, runtime=None,
                 dims: Mapping[str, int] | None = None, static: Iterable[str] = (), registry=None,
                 transport: str | None = None, plan_cache: bool | str | os.PathLike | PlanCache | None = None,
                 progress: bool | DelayedProgress | None = None):
        self.load_report = LoadReport()
        self._progress_setting = progress
        self._progress: DelayedProgress | None = None
        self._cache = cache_for(plan_cache) if registry is None else None
        self._digest: str | None = None
        self._runtime = runtime
        self._registry = registry
        self._fixed_dims = dict(dims or {})
        self._static = tuple(static)
        self._transport = transport
        self._executor = None
        self._executors: dict[tuple, Any] = {}  # one per combination of baked input values
        self._value_inputs: tuple[str, ...] = ()  # graph inputs whose fed values are baked in
        self._size_symbols: tuple[str, ...] = ()  # symbols whose fed sizes are baked in
        # Symbols a plan took as literals (a constraint `symbol = 3`: Conv's num_channels): a feed
        # with another value needs another plan, not an update_dimensions the plan would refuse.
        self._literal_symbols: tuple[str, ...] = ()
        # Where each baked value was needed: symbol or input -> (node, reason) (Recompile).
        self._baked_sites: dict[str, tuple[str, str]] = {}
        self._spec: tuple[dict[str, int], dict[str, bytes]] | None = None  # the last plan's dims, values
        self.stats = SessionStats()
        self._containers: dict[str, str] = {}
        self._first_run = False
        if isinstance(model, CompiledModel):
            self._graph = None
            self._compiled: CompiledModel | None = model
            self._input_shapes = {n: model.tensors[n].shape for n in model.inputs}
            self._input_dtypes = {n: model.tensors[n].dtype for n in model.inputs}
            self._inputs = [_node_arg(n, model.tensors[n].dtype, model.tensors[n].shape) for n in model.inputs]
            self._outputs = [_node_arg(n, model.tensors[n].dtype, model.tensors[n].shape) for n in model.outputs]
        else:
            start = time.perf_counter()
            self._graph = model if isinstance(model, IrGraph) else load_model(model)
            self.load_report.parse_s = time.perf_counter() - start
            if self._cache is not None:
                start = time.perf_counter()
                self._digest = self._cache.digest(model)
                self.load_report.cache_s = time.perf_counter() - start
            self._compiled = None
            # Sequence/optional inputs: the session compiles for the structure fed (flatten).
            self._containers = {n: self._graph.tensor(n).container for n in self._graph.inputs
                                if self._graph.tensor(n).container}
            # dims naming no input's symbol fail here, not at the first run (a sequence input
            # compiles lazily, for the structure fed).
            used = input_symbols(self._graph)
            for name in self._fixed_dims:
                if name not in used and not name.startswith(RESERVED_PREFIX):
                    raise unknown_dimension(self._graph, name, used)
            tensors = [n for n in self._graph.inputs if n not in self._containers]
            self._input_shapes = {n: self._graph.tensor(n).shape for n in tensors}
            self._input_dtypes = {n: self._graph.tensor(n).dtype.name for n in tensors}
            self._inputs = [_node_arg(n, self._graph.tensor(n).dtype.name, self._graph.tensor(n).shape)
                            if n in self._input_shapes else _container_arg(n, self._graph.tensor(n))
                            for n in self._graph.inputs]
            self._outputs = self._infer_outputs()
        self._input_names = frozenset(a.name for a in self._inputs)
        self._input_numpy = [(n, dtypes.from_name(d).numpy) for n, d in self._input_dtypes.items()]
        self._last: tuple | None = None  # (feed shapes, executor, dims) of the last call (run)

    def _pipeline(self):
        return CompilerPipeline(self._registry or core_operator_registry())

    def _infer_outputs(self) -> list[NodeArg]:
        """Output dtypes and symbolic shapes, from inference alone (no dims needed)."""
        assert self._graph is not None
        symbols = {s for shape in self._input_shapes.values() for d in shape
                   for s in (d.symbols if isinstance(d, SymDim) else ())}
        placeholder = {s: self._fixed_dims.get(s, 1) for s in symbols}
        if self._containers:  # the structure fed decides the outputs
            return [NodeArg(n, "tensor(unknown)", []) for n in self._graph.outputs]
        stand_ins = symbols - self._fixed_dims.keys()
        pipeline = self._pipeline()
        try:
            graph = pipeline.run_passes(self._graph, placeholder, until=Stage.INFERENCE, placeholders=stand_ins)
        except ShapeInferenceError as exc:
            # Shapes depend on input values, or symbolic inference cannot decide without real
            # sizes (a model valid for some inputs only): the first run infers with the feed's
            # shapes (see _compile_for) and reports what is wrong for them, if anything is.
            if not isinstance(exc, ValueRequiredError) and not stand_ins:
                raise
            return [NodeArg(n, "tensor(unknown)", []) for n in self._graph.outputs]
        assert pipeline.context is not None
        sequences = pipeline.context.containers.get("structure", {})
        return [NodeArg(n, "seq", []) if n in sequences else
                _node_arg(n, graph.tensor(n).dtype.name, graph.tensor(n).shape) for n in self._graph.outputs]

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    @property
    def executor(self):
        """The PlanExecutor (None before the first run)."""
        return self._executor

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        shapes = self._check_feeds(input_feed)
        last = self._last
        if last is not None and last[0] == shapes:
            # The shapes of the call before: the same executor and dims (update_dimensions below
            # is then a no-op, unless the executor's dims were changed through `executor`).
            _, executor, dims = last
            feeds = input_feed
        else:
            input_feed = {**input_feed, **flatten(self._containers, input_feed)}
            executor = self._executor_for(input_feed)
            bound = {**bind_dims(self._input_shapes, input_feed), **self._fixed_dims}
            dims = {k: v for k, v in bound.items() if k in executor.dims}
            feeds = {k: v for k, v in input_feed.items() if k not in self._value_inputs and k not in self._containers}
            # Which executor and dims a call takes is a function of its feeds' shapes alone
            # unless input values or fed structures are baked into plans.
            self._last = None if self._value_inputs or self._containers else (shapes, executor, dims)
            if last is not None:  # the feeds' shapes changed since the last call: its result first
                executor.hold_work_ahead()
        executor.update_dimensions(dims)
        names = list(output_names) if output_names else [a.name for a in self._outputs]
        containers = executor.model.metadata.get("containers", {}).get("structure", {})
        wanted = list(dict.fromkeys(leaf for n in names for leaf in leaves(containers.get(n, n))))
        start = time.perf_counter()
        result = executor.run(feeds, wanted)
        if self._first_run:  # the driver may compile kernels at their first dispatch (lavapipe does)
            self.load_report.first_run_s, self._first_run = time.perf_counter() - start, False
        return [assemble(containers.get(n, n), result) for n in names]

    def _check_feeds(self, input_feed: Mapping[str, Any]) -> tuple:
        """The fed tensors' shapes, after checking the feed's names and dtypes (InputError)."""
        known = self._input_names
        if len(input_feed) != len(known) or any(k not in known for k in input_feed):
            unknown = [k for k in input_feed if k not in known]
            missing = [k for k in known if k not in input_feed]
            parts = [f"unknown inputs {unknown}"] if unknown else []
            parts += [f"missing inputs {missing}"] if missing else []
            raise InputError("; ".join(parts) + f" (the model's inputs: {', '.join(a.name for a in self._inputs)})")
        shapes = []
        for name, dtype in self._input_numpy:
            value = input_feed[name]
            if type(value) is not np.ndarray:
                if hasattr(value, "buffer"):  # a DeviceTensor: the executor checks it
                    shapes.append(value.shape)
                    continue
                value = np.asarray(value)
            if value.dtype != dtype:
                raise InputError(f"input '{name}' has dtype {value.dtype}, expected {self._input_dtypes[name]}")
            shapes.append(value.shape)
        return tuple(shapes)

    # ---- compilation, specialized on input values / sizes where shapes depend on them -----
    def _key(self, feeds: Mapping[str, Any], dims: Mapping[str, int]) -> tuple:
        """What a compiled plan is specialized on: baked input values, fed structures, baked sizes."""
        values = tuple((n, np.asarray(feeds[n]).tobytes(), np.shape(feeds[n])) for n in self._value_inputs)
        structure = tuple((n, k, np.shape(v), np.asarray(v).dtype.str) for n, k, v in elements(self._containers,
                                                                                               feeds))
        sizes = (*self._size_symbols, *self._literal_symbols)
        return values + structure + tuple((s, dims.get(s)) for s in sizes)

    def _executor_for(self, feeds: Mapping[str, Any]):
        dims = {**bind_dims(self._input_shapes, feeds), **self._fixed_dims}
        executor = self._executors.get(self._key(feeds, dims))
        if executor is not None:
            self._executor = executor
            self._remember_spec(feeds, dims)
            return executor
        if self._executors:  # another specialization: a load of its own
            self.load_report = LoadReport()
        report = self.load_report
        if self._graph is None:
            report.cache = "plan"
        setting = self._progress_setting
        self._progress = setting if isinstance(setting, DelayedProgress) else \
            None if setting is False else DelayedProgress("loading")
        if self._progress is not None:
            self._progress.start = time.perf_counter()  # the clock of this load
        try:
            return self._load(feeds, dims, report)
        finally:
            if self._progress is not None:
                self._progress.close()
            self._progress = None

    def _load(self, feeds: Mapping[str, Any], dims: Mapping[str, int], report: LoadReport):
        """A new executor for `feeds` (compiled, or from the plan cache)."""
        compiled = self._compiled if self._graph is None else self._compile_for(feeds, dims)
        if self._graph is not None:
            if self._spec is not None:
                self.stats.recompiles.extend(self._recompile_causes(feeds, dims))
            self.stats.compiles += 1
            for use in literal_uses(compiled):
                for symbol in use.symbols:
                    self._baked_sites.setdefault(symbol, (use.node, use.reason))
            literal = {s for use in literal_uses(compiled) for s in use.symbols}
            self._literal_symbols = tuple(sorted({*self._literal_symbols, *literal}))
            self._remember_spec(feeds, dims)
        if self._runtime is None:
            start = time.perf_counter()
            self._runtime = Runtime()
            report.device_s = time.perf_counter() - start
        assert compiled is not None
        # A plan from the cache ran in an earlier process: the driver's disk cache has the kernels
        # its first run replays (helpers then compile only in the background: runtime/ahead.py).
        executor = self._runtime.load_model(compiled, transport=self._transport, progress=None if self._progress is None
                                            else self._progress.stage("pipelines"), compile_ahead=report.cache != "hit")
        report.runtime = replace(executor.stats.load)  # as loaded: later runs build more (alternatives)
        self._first_run = True
        if len(self._executors) >= _MAX_SPECIALIZATIONS:
            self._executors.pop(next(iter(self._executors)))
        # The key again: compiling may have found more inputs or sizes to specialize on.
        self._executors[self._key(feeds, dims)] = self._executor = executor
        return executor

    def _remember_spec(self, feeds: Mapping[str, Any], dims: Mapping[str, int]) -> None:
        if self._graph is not None:
            self._spec = (dict(dims), {n: np.asarray(feeds[n]).tobytes() for n in self._value_inputs})

    def _recompile_causes(self, feeds: Mapping[str, Any], dims: Mapping[str, int]) -> list[Recompile]:
        """What differs from the last plan compiled among the values plans are specialized on."""
        assert self._spec is not None
        old_dims, old_values = self._spec
        out = [Recompile(s, *self._baked_sites.get(s, ("", "its value is baked into the plan")), old_dims.get(s),
                         dims.get(s))
               for s in (*self._literal_symbols, *self._size_symbols) if old_dims.get(s) != dims.get(s)]
        out += [Recompile(n, *self._baked_sites.get(n, ("", "its values are baked into the plan")), "(other values)",
                          "(new values)")
                for n in self._value_inputs if old_values.get(n) != np.asarray(feeds[n]).tobytes()]
        # Otherwise the fed structure of a sequence or optional input changed.
        return out or [Recompile(", ".join(self._containers), "", "the structure fed is compiled into the plan",
                                 None, None)]

    def _compile_for(self, feeds: Mapping[str, Any], dims: Mapping[str, int]) -> CompiledModel:
        """Compile; when inference needs a value it cannot compute symbolically, specialize:

        - a value computed from graph inputs' *values* (a Reshape shape, Reduce axes, Slice starts
          fed at run time): bake those inputs' fed values into the plan;
        - a value computed from input *sizes* in a way symbolic dims cannot follow (a Resize size
          from Shape through float math, as exporters write `interpolate(scale_factor=...)`): bake
          the feed's real sizes of those symbols, leaving the others dynamic.

        Then compile again. Later calls with other values or sizes compile another plan (a few
        are kept); calls that only change the remaining symbols update dimensions in place.
        """
        while True:
            graph = self._specialized_graph(feeds, dims)
            shapes = {n: graph.tensor(n).shape for n in graph.inputs}
            baked = set(self._size_symbols)  # no longer symbols of the specialized graph
            given = {k: v for k, v in {**bind_dims(shapes, feeds), **self._fixed_dims}.items() if k not in baked}
            static = [s for s in self._static if s not in baked]
            pipeline = self._pipeline()
            key = None if self._digest is None else plan_key(self._digest, given, static, compiler_signature(pipeline),
                                                             self._key(feeds, dims))

            progress = self._progress

            def compile_fn() -> tuple[CompiledModel, dict[str, float]]:
                draw = None if progress is None else progress.stage("compiling")
                return (pipeline.compile(graph, given, static, progress=None if draw is None else
                                         lambda rec, done, total: draw(done, total)),
                        stage_times(pipeline.history))

            try:
                compiled = cached_compile(self._cache, key, self.load_report, compile_fn, write_later=True)
            except ValueRequiredError as exc:
                sources, symbols = set(exc.sources), set(exc.symbols)
                if not sources and not symbols:
                    sources = _graph_input_sources(graph, exc.tensor)
                sources -= set(self._value_inputs)
                symbols = {s for s in symbols - set(self._size_symbols) if s in dims}
                if not sources and not symbols:
                    raise
                for name in (*sources, *symbols):
                    self._baked_sites.setdefault(name, (exc.node or "", "its value to compute a shape "
                                                        "(symbolic dims cannot follow the arithmetic)"))
                self._value_inputs = tuple(sorted({*self._value_inputs, *sources}))
                self._size_symbols = tuple(sorted({*self._size_symbols, *symbols}))
                continue
            if any(a.type == "tensor(unknown)" for a in self._outputs):
                containers = compiled.metadata.get("containers", {}).get("structure", {})
                self._outputs = [NodeArg(a.name, "seq" if a.name in containers else "tensor(unknown)", [])
                                 if a.name not in compiled.tensors or a.name in containers else
                                 _node_arg(a.name, compiled.tensors[a.name].dtype, compiled.tensors[a.name].shape)
                                 for a in self._outputs]
            return compiled

    def _specialized_graph(self, feeds: Mapping[str, Any], dims: Mapping[str, int]):
        assert self._graph is not None
        if not self._value_inputs and not self._containers and not self._size_symbols:
            return self._graph
        graph = self._graph.copy()
        for name in self._containers:
            feed_structure(graph, name, feeds[name])
        for name in self._value_inputs:
            t = graph.tensor(name)
            t.value = np.asarray(feeds[name])
            t.shape, t.kind = tuple(t.value.shape), TensorKind.WEIGHT
            graph.inputs.remove(name)
        sizes = {s: dims[s] for s in self._size_symbols}
        for name in graph.inputs:
            t = graph.tensor(name)
            t.shape = tuple(d.substitute(sizes) if isinstance(d, SymDim) else d for d in t.shape)
        return graph


# ---- sequence and optional inputs (the rest in onyxia/session_containers.py) --------------------

def _container_arg(name: str, t: TensorDef) -> NodeArg:
    elem = _ORT_TYPE.get(t.dtype.name, t.dtype.name) if t.dtype is not None else "unknown"
    kind = "seq" if t.container == "sequence" else "optional"
    return NodeArg(name, f"{kind}(tensor({elem}))", [])
