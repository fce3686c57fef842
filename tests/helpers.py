"""Shared test helpers: build small ONNX models, run them on onyxia and on onnxruntime."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry

# onnxruntime in the test extra reads IR versions up to 10 reliably.
IR_VERSION = 10


def tensor_type(dtype: Any) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[tuple[str, Any, Sequence[Any]]],
               outputs: Sequence[tuple[str, Any, Sequence[Any] | None]] | Sequence[str],
               initializers: Mapping[str, np.ndarray] | None = None, *, opset: int = 18,
               extra_opsets: Mapping[str, int] | None = None, name: str = "test") -> onnx.ModelProto:
    """A model from nodes; inputs as (name, numpy dtype, shape with ints/str dims).

    Outputs may be bare names (dtype/shape left for inference) or (name, dtype, shape).
    """
    vis_in = [helper.make_tensor_value_info(n, tensor_type(dt), list(shape)) for n, dt, shape in inputs]
    vis_out = []
    for out in outputs:
        if isinstance(out, str):
            vis_out.append(helper.make_empty_tensor_value_info(out))
        else:
            n, dt, shape = out
            vis_out.append(helper.make_tensor_value_info(n, tensor_type(dt), None if shape is None else list(shape)))
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), name, vis_in, vis_out, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's CPU outputs, integer products computed exactly on every x86 CPU (tests/ort_oracle.py)."""
    import onnxruntime as ort

    from tests.ort_oracle import exact_for_ort

    model, feeds = exact_for_ort(model, feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def compile_model(model: onnx.ModelProto, dims: Mapping[str, int] | None = None, static: Sequence[str] = ()):
    graph = onyxia.load_model(model)
    return CompilerPipeline(core_operator_registry()).compile(graph, dims or {}, static)


def run_onyxia(runtime, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
               dims: Mapping[str, int] | None = None, **kw) -> list[np.ndarray]:
    compiled = compile_model(model, dims, **kw)
    exe = runtime.load_model(compiled)
    out = exe.run(dict(feeds))
    return [out[n] for n in compiled.outputs]


def assert_matches_ort(runtime, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                       dims: Mapping[str, int] | None = None, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Run on onyxia and onnxruntime; outputs must agree in dtype, shape and value."""
    ours = run_onyxia(runtime, model, feeds, dims)
    ref = run_ort(model, feeds)
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} vs onnxruntime {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} vs onnxruntime {b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")


def random_array(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    """Small random values of `dtype` (bools, ints in [-50, 50), normal floats)."""
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def check_across_dims(runtime, model: onnx.ModelProto, make_feeds, dims_list, *, rtol: float = 0.0,
                      atol: float = 0.0, compiled=None) -> None:
    """Compile once for the first dims (or take `compiled`), then run every dims set after
    update_dimensions: outputs must equal onnxruntime's (exactly by default: data movement ops)
    and nothing may recompile."""
    compiled = compiled or compile_model(model, dims_list[0])
    exe = runtime.load_model(compiled)
    for dims in dims_list:
        exe.update_dimensions(dims)
        feeds = make_feeds(dims)
        ours = exe.run(feeds)
        for name, ref in zip(compiled.outputs, run_ort(model, feeds)):
            assert ours[name].shape == ref.shape, (name, dims)
            np.testing.assert_allclose(ours[name], ref, rtol=rtol, atol=atol, err_msg=f"{name} at {dims}")
    assert exe.stats.recompiles == 0


def compile_with_default_passes(model: onnx.ModelProto, dims: Mapping[str, int], *, without: str | None = None):
    """(pipeline, compiled) with the default optimization passes, `without` the one named."""
    from onyxia.compiler.passes import default_optimization_passes

    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    for p in default_optimization_passes():
        if p.name != without:
            pipeline.add_pass(p)
    return pipeline, pipeline.compile(onyxia.load_model(model), dims)


__all__ = ["IR_VERSION", "TensorProto", "assert_matches_ort", "check_across_dims", "compile_model", "helper", "i64",
           "make_model", "numpy_helper", "random_array", "run_onyxia", "run_ort", "tensor_type"]


def live_dispatches(compiled, dims: Mapping[str, int], adapter: str = "gpu") -> list:
    """The Dispatch steps a run at `dims` encodes on an adapter of kind `adapter` with tuning off:
    each Select's heuristic alternative, no empty grid."""
    from onyxia.plan import AdapterFacts, Dispatch
    from onyxia.plan.cost import replayed_steps

    env = {**compiled.dims, **dims}
    steps = replayed_steps([s for op in compiled.operations for s in op.steps], env, adapter=AdapterFacts(adapter))
    return [s for s in steps if isinstance(s, Dispatch)
            and all(w.evaluate(env) if hasattr(w, "evaluate") else w for w in s.workgroups)]
