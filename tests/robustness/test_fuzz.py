"""Random small graphs against onnxruntime, through compile, run and update_dimensions sequences.

Each example is a chain of elementwise, broadcasting, reshape, reduction and softmax ops over
shapes with symbolic dims (tests/builders/graphs.py), float32 or (one in five) int32. It is compiled for the
first dims of a random sequence, with a random subset of its symbols static; then every dims of
the sequence is applied with update_dimensions and run on fresh inputs. Each run must match
onnxruntime, and only a change of a static symbol may recompile. An int32 example whose result
depends on int32 overflow (undefined in ONNX; the graph computed in int64 differs) is rejected.

CI runs the `fuzz-ci` profile (25 fixed examples per test). The long profile, 12,500 graphs:

    .venv/bin/python -m pytest tests/robustness/test_fuzz.py -n 2 --hypothesis-profile=fuzz-long
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings
from onnx import numpy_helper

from tests.builders.graphs import Case, graphs

pytestmark = pytest.mark.gpu

FUZZ = settings.get_profile("fuzz-long" if settings.get_current_profile_name() == "fuzz-long" else "fuzz-ci")


# Known and filed: onyxia's ReduceMax/ReduceMin drop NaN where onnxruntime propagates it (issue 12
# root cause 2; tests/robustness/test_silent_wrong.py::test_reduce_max_propagates_nan is its strict
# xfail). The fuzzer reaches it through an empty reduction (-inf) fed to Softmax (NaN). Until that
# is fixed, in graphs with those ops a NaN of the reference may be a number here; every other
# element must still match. Remove this once the xfail flips.
NAN_DROPPING_OPS = frozenset({"ReduceMax", "ReduceMin"})


def _session(model):
    import onnxruntime as ort

    # No graph optimizations: the oracle runs the graph as written (onnxruntime's Relu+Clip
    # fusion fails on int32 Clip bounds, an onnxruntime bug the fuzzer found).
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """The int32 graph computed in int64: inputs and int32 constants widened."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    for vi in wide.graph.input:
        vi.type.tensor_type.elem_type = onnx.TensorProto.INT64
    for i, t in enumerate(wide.graph.initializer):
        if t.data_type == onnx.TensorProto.INT32:
            wide.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.int64), t.name))
    return wide


def _overflows(wide_sess, names: list[str], feeds: dict, expected: list[np.ndarray]) -> bool:
    """Whether an int32 result depends on int32 overflow, which ONNX leaves undefined (and
    onnxruntime resolves differently per kernel): computed in int64, it comes out different."""
    wide = wide_sess.run(names, {k: v.astype(np.int64) for k, v in feeds.items()})
    return any(w.shape != e.shape or not np.array_equal(w, e.astype(np.int64)) for w, e in zip(wide, expected))


def check(runtime, case: Case) -> None:
    import onyxia
    from onyxia.compiler import CompilerPipeline

    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(
        onyxia.load_model(case.model), case.dims_sequence[0], case.static)
    exe = runtime.load_model(compiled)
    sess = _session(case.model)
    wide_sess = _session(_widened(case.model)) if case.dtype == np.int32 else None
    nan_lenient = any(n.op_type in NAN_DROPPING_OPS for n in case.model.graph.node)
    names = [o.name for o in case.model.graph.output]
    rng = np.random.default_rng(0)
    static_changes = 0
    for step, dims in enumerate(case.dims_sequence):
        if step and any(dims[s] != case.dims_sequence[step - 1][s] for s in case.static):
            static_changes += 1
        if dims:
            exe.update_dimensions(dims)
        feeds = case.feeds(dims, rng)
        ours = exe.run(feeds)
        reference = sess.run(names, feeds)
        assume(wide_sess is None or not _overflows(wide_sess, names, feeds, reference))
        for name, expected in zip(names, reference):
            got = ours[name]
            if nan_lenient and got.shape == expected.shape and expected.dtype.kind == "f":
                got = np.where(np.isnan(expected), expected, got)
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4,
                                       err_msg=f"output {name}, run {step} with dims {dims}")
    if static_changes == 0:
        assert exe.stats.recompiles == 0


@FUZZ
@given(case=graphs(("unary", "binary")))
def test_elementwise_broadcast_chains(runtime, case):
    check(runtime, case)


@FUZZ
@given(case=graphs(("unary", "binary", "reshape", "concat", "expand")))
def test_reshape_transpose_concat_expand_chains(runtime, case):
    check(runtime, case)


@FUZZ
@given(case=graphs(("unary", "binary", "reduce", "softmax")))
def test_reduction_and_softmax_chains(runtime, case):
    check(runtime, case)


@FUZZ
@given(case=graphs(("unary", "binary", "slice", "pad", "gather", "matmul", "cumsum", "clip")))
def test_slice_pad_gather_matmul_cumsum_clip_chains(runtime, case):
    check(runtime, case)


@FUZZ
@given(case=graphs(("unary", "binary", "reshape", "concat", "expand", "reduce", "softmax", "slice", "pad",
                    "gather", "matmul", "cumsum", "clip"), max_ops=8, max_updates=5))
def test_mixed_chains_with_long_update_sequences(runtime, case):
    check(runtime, case)
