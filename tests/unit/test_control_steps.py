"""Host control flow on the null backend (no GPU): ReadSymbol (data-dependent symbols), BranchStep
and LoopStep. The null backend runs copies for real and records every dispatch, so these tests
see which steps a run encoded, with which sizes, and how many times it synced."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.errors import DimensionError, InputError
from onyxia.operators import Operator, core_operator_registry
from onyxia.plan import BranchStep, CompiledModel, LoopStep, ReadSymbol
from onyxia.runtime.null import CopyRecord, DispatchRecord, null_executor
from tests.helpers import compile_model, make_model

DOMAIN = "test.control"


class TakeCount(Operator):
    """y = x[:x[0]] (int32): a copy of the count, a ReadSymbol of it, a copy sized by the symbol.

    `bounded=False` gives the symbol no capacity bound: its buffer grows when a run needs more."""

    op_type = "TakeCount"
    domain = DOMAIN

    def __init__(self, bounded: bool = True):
        self.bounded = bounded

    def infer(self, ctx):
        (n,) = ctx.input_shape(0)
        return [(ctx.input_dtype(0), (ctx.env.data_symbol(f"{ctx.node.name}_k", n if self.bounded else None),))]

    def plan(self, ctx):
        (n,) = ctx.input_shape(0)
        (k,) = ctx.output_shape(0)
        count = ctx.scratch(1, "int32", "count")
        return [ctx.copy(ctx.input(0), count, 4), ReadSymbol(count, str(k), n if self.bounded else None),
                ctx.copy(ctx.input(0), ctx.output(0), k * 4)]


def take_count(bounded: bool = True, n: int | str = 8) -> CompiledModel:
    model = make_model([h.make_node("TakeCount", ["x"], ["t"], domain=DOMAIN, name="take"),
                        h.make_node("Neg", ["t"], ["y"])],
                       [("x", np.int32, [n])], ["t", "y"], extra_opsets={DOMAIN: 1})
    registry = core_operator_registry().register(TakeCount(bounded), 1)
    return CompilerPipeline(registry).compile(onyxia.load_model(model), {"n": 8} if isinstance(n, str) else {})


def feed(k: int, n: int = 8) -> dict[str, np.ndarray]:
    x = np.arange(100, 100 + n, dtype=np.int32)
    x[0] = k
    return {"x": x}


# ---- ReadSymbol ------------------------------------------------------------------------------

def test_read_symbol_sizes_the_steps_after_it():
    compiled = take_count()
    (symbol,) = compiled.data_symbols
    assert compiled.data_symbols[symbol] == 8 and compiled.dims[symbol] == 8  # capacity: the bound
    exe = null_executor(compiled)
    for k in (3, 8, 0, 5):
        out = exe.run(feed(k))
        np.testing.assert_array_equal(out["t"], feed(k)["x"][:k])
        assert out["y"].shape == (k,)
        copies = [r for r in exe.backend.runs[-1] if isinstance(r, CopyRecord)]
        assert [c.size for c in copies] == [4, 4 * k] if k else [4]  # patched after the readback (0: skipped)
        negs = [r for r in exe.backend.runs[-1] if isinstance(r, DispatchRecord)]
        assert (len(negs) == 1 and negs[0].params[0] == k) if k else not negs  # the grid follows k too
    assert exe.backend.syncs == 4 and exe.stats.reallocs == 0


def test_read_symbol_value_past_its_limit_is_an_input_error():
    exe = null_executor(take_count())
    with pytest.raises(InputError, match="tensor 'take/count' holds 9, which must be \\[0, 8\\]"):
        exe.run(feed(9))
    np.testing.assert_array_equal(exe.run(feed(2))["t"], [2, 101])  # still usable


def test_an_unbounded_symbol_grows_its_buffers_mid_run():
    compiled = take_count(bounded=False, n=40)
    exe = null_executor(compiled)
    for k in (1, 30, 4, 40):
        np.testing.assert_array_equal(exe.run(feed(k, 40))["t"], feed(k, 40)["x"][:k])
    assert exe.stats.reallocs >= 2  # t and y grew past the first run's capacity


def test_data_symbols_follow_their_bound_and_cannot_be_set():
    compiled = take_count(n="n")
    (symbol,) = compiled.data_symbols
    exe = null_executor(compiled)
    for value in (2, exe.dims[symbol]):  # its current value too (no shortcut for unchanged values)
        with pytest.raises(DimensionError, match=f"dimension '{symbol}' depends on the data"):
            exe.update_dimensions({symbol: value})
    exe.update_dimensions({"n": 20})
    assert exe.dims[symbol] == 20 and exe.capacity["t"] >= 80  # capacity for the new bound
    np.testing.assert_array_equal(exe.run(feed(17, 20))["t"], feed(17, 20)["x"][:17])


def test_a_fed_symbol_needs_no_sync():
    """TopK's k fed as a graph input: the value comes from the host feed."""
    model = make_model([h.make_node("TopK", ["x", "k"], ["v", "i"])], [("x", np.float32, (2, 30)),
                                                                     ("k", np.int64, (1,))], ["v", "i"])
    exe = null_executor(compile_model(model))
    for k in (4, 30, 1):
        out = exe.run({"x": np.zeros((2, 30), np.float32), "k": np.array([k], np.int64)})
        assert out["v"].shape == (2, k) and out["i"].shape == (2, k)
    assert exe.backend.syncs == 0


def test_plans_with_read_symbols_save_and_load(tmp_path):
    compiled = take_count(n="n")
    compiled.save(tmp_path / "p.onyxia")
    loaded = CompiledModel.load(tmp_path / "p.onyxia")
    assert loaded.steps == compiled.steps and loaded.data_symbols == compiled.data_symbols
    np.testing.assert_array_equal(null_executor(loaded).run(feed(6))["t"], feed(6)["x"][:6])


def test_a_plan_without_host_control_flow_reads_back_as_before():
    """No data symbol, no sync: one execute with the outputs read in it (the LLM decode path)."""
    model = make_model([h.make_node("Neg", ["x"], ["y"])], [("x", np.float32, (4,))], ["y"])
    exe = null_executor(compile_model(model))
    assert not exe._device_syncs
    exe.run({"x": np.ones(4, np.float32)})
    assert exe.backend.syncs == 0


def test_compiled_model_data_symbols_default_empty():
    model = make_model([h.make_node("Neg", ["x"], ["y"])], [("x", np.float32, (4,))], ["y"])
    compiled = compile_model(model)
    assert compiled.data_symbols == {} and dataclasses.replace(compiled).data_symbols == {}


# ---- BranchStep and LoopStep -----------------------------------------------------------------

def labels(exe) -> list[str]:
    return [r.shader for r in exe.backend.runs[-1] if isinstance(r, DispatchRecord)]


def test_a_branch_encodes_the_arm_its_condition_reads():
    from tests.control_models import if_model

    exe = null_executor(compile_model(if_model()))
    feeds = {"x": np.ones(3, np.float32), "y": np.ones(3, np.float32)}
    # Greater never runs on the null backend: its output buffer holds what was put there.
    cond = exe.buffers[exe.root(next(s.cond for s in exe.model.steps if isinstance(s, BranchStep)))]
    for value, arm in ((1, ["map_Greater", "map_Add"]), (0, ["map_Greater", "map_Mul", "map_Neg"])):
        cond.data[:4] = np.array([value], np.uint32).tobytes()
        exe.run({**feeds, "s": np.zeros(1, np.float32)})
        assert labels(exe) == arm
    assert exe.backend.syncs == 2


def test_a_static_loop_encodes_its_body_per_iteration_without_syncs():
    from tests.control_models import counting_loop

    exe = null_executor(compile_model(counting_loop(m=4)))
    out = exe.run({"x": np.ones(3, np.float32), "a0": np.full(3, 7, np.float32)})
    assert labels(exe).count("map_Add") == 4 and exe.backend.syncs == 0
    counter = [r for r in exe.backend.runs[-1] if isinstance(r, CopyRecord) and r.src.endswith("iteration-index")]
    assert [r.src_offset for r in counter] == [0, 4, 8, 12]  # the iteration number, copied per iteration
    carried = [(r.src, r.dst) for r in exe.backend.runs[-1] if isinstance(r, CopyRecord) and "acc" in r.src + r.dst]
    assert carried == [("a0", "acc")] + [("acc2", "acc")] * 4 + [("acc", "af")]  # in, per iteration, out
    assert out["scan"].shape == (4, 3)


def test_a_scan_trip_count_follows_update_dimensions():
    from tests.control_models import scan_model

    exe = null_executor(compile_model(scan_model("t"), {"t": 3}))
    for t in (3, 7, 1):
        exe.update_dimensions({"t": t})
        x = np.arange(4 * t, dtype=np.float32).reshape(t, 4)
        exe.run({"s0": np.zeros(4, np.float32), "m0": np.zeros(4, np.float32), "x": x})
        slices = [r for r in exe.backend.runs[-1] if isinstance(r, CopyRecord) and r.src == "x"]
        assert [r.src_offset for r in slices] == [16 * i for i in range(t)]  # x[i] for i < t, 16 bytes each
    assert exe.stats.recompiles == 0 and exe.backend.syncs == 0


def test_a_loop_with_a_device_condition_reads_it_each_iteration():
    from tests.control_models import counting_loop

    compiled = compile_model(counting_loop(m=10, while_limit=5.0))
    exe = null_executor(compiled)
    (loop,) = [s for s in compiled.steps if isinstance(s, LoopStep)]
    cond = exe.buffers[exe.root(loop.cond)]
    cond.data[:4] = np.array([1], np.uint32).tobytes()  # stays true: Less never runs here
    out = exe.run({"x": np.ones(3, np.float32), "a0": np.zeros(3, np.float32)})
    assert exe.backend.syncs == 9 and out["scan"].shape == (10, 3)  # read after each iteration but the last
    cond.data[:4] = np.array([0], np.uint32).tobytes()  # false: one iteration
    out = exe.run({"x": np.ones(3, np.float32), "a0": np.zeros(3, np.float32)})
    assert out["scan"].shape == (1, 3) and exe.dims[loop.iterations] == 1


def test_control_flow_plans_save_and_load(tmp_path):
    from tests.control_models import counting_loop, if_model, scan_model

    for model, dims in ((if_model(), {}), (counting_loop(m_input=True), {}), (scan_model("t", in_axis=1), {"t": 2})):
        compiled = compile_model(model, dims)
        compiled.save(tmp_path / "p.onyxia")
        loaded = CompiledModel.load(tmp_path / "p.onyxia")
        assert loaded.steps == compiled.steps and loaded.symbolic_bindings == compiled.symbolic_bindings
