"""The backend-neutral replay on the null backend (no GPU): update_dimensions patching against a
plan compiled for the new dims, capacity growth and reallocation, static-dim recompiles,
constraints, errors that leave the executor usable, both parameter transports, grid folding,
device tensors, and a new step kind added as one class."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as h

import onyxia
from onyxia.codegen.transport import IMMEDIATE, TRANSPORTS, UNIFORM
from onyxia.errors import DeviceError, DimensionError, InputError, ShaderError
from onyxia.ir.shapes import SymDim
from onyxia.plan import CompiledModel
from onyxia.runtime import DeviceTensor
from onyxia.runtime.commands import DispatchCommand
from onyxia.runtime.dimensions import MIN_BUFFER_BYTES
from onyxia.runtime.null import NULL_LIMITS, CopyRecord, DispatchRecord, NullBackend, null_executor
from onyxia.runtime.replay import PlanReplay
from tests.builders.replay import encoder_model
from tests.helpers import compile_model, make_model, run_ort
from tests.models import gpt2_block, gpt2_feeds

ONYXIA = Path(onyxia.__file__).parent


def encoder_feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + seq)
    return {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
            "ids": rng.integers(0, 16, (batch, seq)).astype(np.int64)}


def needed_bytes(compiled: CompiledModel, dims: dict[str, int]) -> dict[str, int]:
    """Bytes each buffer (not view) needs at `dims`, straight from the tensor table (at least
    MIN_BUFFER_BYTES: a kernel may bind any tensor as vec4s)."""
    return {n: max(SymDim.evaluate(t.nbytes, dims) if isinstance(t.nbytes, SymDim) else t.nbytes, MIN_BUFFER_BYTES)
            for n, t in compiled.tensors.items() if t.alias_of is None}


def last_run(exe: PlanReplay) -> list[DispatchRecord | CopyRecord]:
    return exe.backend.runs[-1]


def program_code(exe: PlanReplay) -> dict[int, str]:
    return {index: program.code for index, program in exe.programs.items()}


# ---- the core is backend-neutral --------------------------------------------------------------

def _module_imports(module: str) -> set[str]:
    """Modules `module` imports at run time (not under `if TYPE_CHECKING:`)."""
    path = ONYXIA.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ONYXIA.parent / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            for child in ("body", "orelse", "handlers", "finalbody"):
                visit(getattr(node, child, []) or [])
    visit(tree.body)
    return found


@pytest.mark.parametrize("module", ["onyxia.runtime.replay", "onyxia.runtime.commands", "onyxia.runtime.null"])
def test_replay_core_and_null_backend_import_no_wgpu(module):
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        imports = _module_imports(current)
        assert "wgpu" not in {i.split(".")[0] for i in imports}, f"{current} imports wgpu (reached from {module})"
        todo += [i for i in imports if i.startswith("onyxia.")]
    assert "onyxia.runtime.wgpu_backend" not in seen


# ---- update_dimensions patches what a fresh compile computes ---------------------------------

CASES = {
    "encoder": (encoder_model, {"batch": 2, "seq": 8}, [{"seq": 3}, {"batch": 1, "seq": 1}, {"seq": 13},
                                                          {"batch": 3, "seq": 5}]),
    "gpt2": (lambda: gpt2_block(layers=2), {"batch": 1, "seq": 8}, [{"seq": 1}, {"seq": 5}, {"batch": 2, "seq": 17}]),
}


@pytest.mark.parametrize("transport", TRANSPORTS, ids=str)
@pytest.mark.parametrize("case", CASES)
def test_patched_commands_equal_a_plan_compiled_for_the_new_dims(case, transport):
    """Workgroups, parameter words, copies and host data after update_dimensions are exactly
    those of the same model compiled for the new dims; no recompiles for dynamic dims."""
    build, dims, schedule = CASES[case]
    model = build()
    exe = null_executor(compile_model(model, dims), transport=transport)
    current = dict(dims)
    for change in schedule:
        current.update(change)
        exe.update_dimensions(change)
        fresh = null_executor(compile_model(model, current), transport=transport)
        feeds = gpt2_feeds(current) if case == "gpt2" else encoder_feeds(current["batch"], current["seq"])
        got, want = exe.run(feeds), fresh.run(feeds)
        assert last_run(exe) == last_run(fresh), f"{case} at {current}"
        assert exe.dims == fresh.dims
        assert exe.dims == current
        reference = run_ort(model, feeds)
        for (name, array), ref in zip(got.items(), reference):
            assert array.shape == want[name].shape == ref.shape, name  # output shapes refreshed
        if case == "encoder":  # the Shape output is host data (WriteBuffer) the update rewrote
            np.testing.assert_array_equal(got["shp"], reference[1])
    assert exe.stats.recompiles == 0
    assert exe.stats.dimension_updates == len(schedule)


def test_unchanged_dimensions_do_nothing():
    exe = null_executor(compile_model(encoder_model(), {"batch": 2, "seq": 8}))
    uploads = exe.backend.param_uploads
    exe.update_dimensions({"seq": 8, "batch": 2})
    exe.update_dimensions({"seq": np.int64(8)})
    exe.update_dimensions({})
    assert exe.stats.dimension_updates == 0 and exe.backend.param_uploads == uploads
    # The shortcut for unchanged values leaves the checks of the others in place.
    for bad, message in (({"seq": 8, "nope": 8}, "unknown dimension 'nope'"), ({"seq": 8, "batch": True}, "batch")):
        with pytest.raises(DimensionError, match=message):
            exe.update_dimensions(bad)


# ---- capacities ---------------------------------------------------------------------------

def test_capacity_grows_only_past_it_and_reallocates_exactly_the_grown_buffers():
    compiled = compile_model(encoder_model(), {"batch": 2, "seq": 8})
    exe = null_executor(compiled)
    backend = exe.backend
    first = dict(exe.buffers)
    capacity = needed_bytes(compiled, {"batch": 2, "seq": 8})
    assert {n: b.nbytes for n, b in first.items()} == capacity
    for seq in (1, 5, 8):  # within the capacity compiled for
        exe.update_dimensions({"seq": seq})
        assert exe.stats.reallocs == 0 and exe.buffers == first
    exe.update_dimensions({"seq": 13})
    grown = {n for n, size in needed_bytes(compiled, {"batch": 2, "seq": 13}).items() if size > capacity[n]}
    assert grown, "some buffer depends on seq"
    assert exe.stats.reallocs == len(grown)
    assert {n for n in first if exe.buffers[n] is not first[n]} == grown
    assert all(first[n].freed for n in grown) and not any(first[n].freed for n in set(first) - grown)
    assert {n: exe.buffers[n].nbytes for n in grown} == {n: needed_bytes(compiled, exe.dims)[n] for n in grown}
    exe.run(encoder_feeds(2, 13))  # the null backend asserts no dispatch binds a freed buffer
    bound = {label for r in last_run(exe) if isinstance(r, DispatchRecord) for label in r.buffers}
    assert grown & bound, "dispatches bind the new buffers"
    # Shrinking, and growing back within the new capacity, never reallocates again.
    for dims in ({"seq": 3, "batch": 1}, {"seq": 13, "batch": 2}, {"seq": 10}):
        exe.update_dimensions(dims)
    assert exe.stats.reallocs == len(grown)
    assert backend.live_bytes == sum(max(capacity[n], needed_bytes(compiled, {"batch": 2, "seq": 13})[n])
                                     for n in capacity)


def test_bind_groups_are_made_for_what_a_run_replays_and_again_only_where_a_buffer_grew():
    exe = null_executor(compile_model(encoder_model(), {"batch": 2, "seq": 8}))
    backend = exe.backend
    idle = {id(c) for c in exe.commands if isinstance(c, DispatchCommand)} - {id(d) for d in exe.dispatch_commands()}
    assert idle, "the plan has Select alternatives a run does not replay"
    assert all(c.bindings is None for c in exe.commands if id(c) in idle)
    live = exe.dispatch_commands()
    assert all(d.bindings is not None for d in live) and backend.bind_groups == len(live)
    held = {id(d): d.bindings for d in live}
    first = dict(exe.buffers)
    exe.update_dimensions({"seq": 13})
    grown = {n for n in first if exe.buffers[n] is not first[n]}
    assert grown
    live = exe.dispatch_commands()
    remade = [d for d in live if d.bindings is not held.get(id(d))]
    assert remade and all(d.bindings is not None for d in live)
    # Only the dispatches binding a grown buffer (or newly replayed) got new ones; idle ones none.
    assert all(id(d) not in held or any(exe.root(b.tensor) in grown for b in d.step.bindings) for d in remade)
    assert all(d.bindings is held[id(d)] for d in live if id(d) in held
               and not any(exe.root(b.tensor) in grown for b in d.step.bindings))
    assert backend.bind_groups == len(held) + len(remade)
    exe.run(encoder_feeds(2, 13))  # the null backend asserts every dispatch has its bind group


def test_shared_buffers_of_the_memory_plan_are_allocated_once():
    compiled = compile_model(gpt2_block(layers=2), {"batch": 1, "seq": 8})
    shared = compiled.metadata["memory"]["shared"]
    assert shared > 0, "the memory plan shares buffers in a 2-layer block"
    exe = null_executor(compiled)
    assert len(exe.backend.allocations) == sum(1 for t in compiled.tensors.values() if t.alias_of is None)
    exe.update_dimensions({"seq": 30})
    grown = {n for n, size in needed_bytes(compiled, {"batch": 1, "seq": 30}).items()
             if size > needed_bytes(compiled, {"batch": 1, "seq": 8})[n]}
    assert exe.stats.reallocs == len(grown)  # one realloc per buffer, however many tensors share it


# ---- static dims --------------------------------------------------------------------------

def static_dims_model() -> onnx.ModelProto:
    """Kernels over seq only (Relu of pos), batch only (Neg of v) and both (Add, MatMul)."""
    w = np.random.default_rng(3).standard_normal((8, 5)).astype(np.float32)
    nodes = [h.make_node("Add", ["x", "pos"], ["xp"]), h.make_node("MatMul", ["xp", "W"], ["y"]),
             h.make_node("Relu", ["pos"], ["pr"]), h.make_node("Neg", ["v"], ["vn"])]
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 8]), ("pos", np.float32, ["seq", 8]),
                              ("v", np.float32, ["batch", 4])], ["y", "pr", "vn"], {"W": w})


def baking(compiled: CompiledModel, symbol: str) -> set[int]:
    return {i for i, s in enumerate(compiled.shaders)
            if any(isinstance(v, SymDim) and symbol in v.symbols for _, v in (*s.defs, *s.constants))}


@pytest.mark.parametrize("transport", TRANSPORTS, ids=str)
def test_static_dim_change_recompiles_exactly_the_shaders_baking_it(transport):
    model = static_dims_model()
    compiled = compile_model(model, {"batch": 2, "seq": 4}, static=["seq"])
    dependent = baking(compiled, "seq")
    assert dependent and len(dependent) < len(compiled.shaders)
    exe = null_executor(compiled, transport=transport)
    built = len(exe.backend.programs)
    before = program_code(exe)
    exe.update_dimensions({"seq": 3})
    assert exe.stats.recompiles == len(dependent)
    assert [p.label for p in exe.backend.programs[built:]] == [compiled.shaders[i].label for i in sorted(dependent)]
    fresh = null_executor(compile_model(model, {"batch": 2, "seq": 3}, static=["seq"]), transport=transport)
    # The WGSL a fresh compile bakes (which builds only the programs a run replays at seq 3).
    assert program_code(fresh).items() <= program_code(exe).items()
    assert {i for i in before if before[i] != program_code(exe)[i]} <= dependent
    exe.update_dimensions({"batch": 1})  # dynamic: no recompile
    assert exe.stats.recompiles == len(dependent)
    exe.update_dimensions({"seq": 9})  # static and past capacity: recompiles and reallocates
    assert exe.stats.recompiles == 2 * len(dependent)
    assert exe.stats.reallocs > 0
    exe.run({"x": np.zeros((1, 9, 8), np.float32), "pos": np.zeros((9, 8), np.float32),
             "v": np.zeros((1, 4), np.float32)})
    fresh = null_executor(compile_model(model, {"batch": 1, "seq": 9}, static=["seq"]), transport=transport)
    fresh.run({"x": np.zeros((1, 9, 8), np.float32), "pos": np.zeros((9, 8), np.float32),
               "v": np.zeros((1, 4), np.float32)})
    assert program_code(fresh).items() <= program_code(exe).items()
    assert last_run(exe) == last_run(fresh)


def test_a_shader_baking_several_values_recompiles_once():
    model = make_model([h.make_node("Add", ["x", "col"], ["y"])],
                       [("x", np.float32, ["seq", 8]), ("col", np.float32, ["seq", 1])], ["y"])
    compiled = compile_model(model, {"seq": 4}, static=["seq"])
    (spec,) = compiled.shaders
    assert len([v for _, v in (*spec.defs, *spec.constants) if isinstance(v, SymDim)]) >= 2
    exe = null_executor(compiled)
    exe.update_dimensions({"seq": 6})
    assert exe.stats.recompiles == 1


# ---- constraints and errors ---------------------------------------------------------------

def test_broken_constraint_is_refused_and_changes_nothing():
    model = make_model([h.make_node("Cast", ["mask"], ["m"], to=1), h.make_node("Mul", ["x", "m"], ["y"])],
                       [("x", np.float32, ["batch", "seq"]), ("mask", np.int64, ["batch", "mask_seq"])], ["y"])
    exe = null_executor(compile_model(model, {"batch": 2, "seq": 5, "mask_seq": 5}))
    exe.update_dimensions({"seq": 3, "mask_seq": 3})
    records = exe.run({"x": np.zeros((2, 3), np.float32), "mask": np.zeros((2, 3), np.int64)}) and last_run(exe)
    with pytest.raises(DimensionError, match="seq = 4 and mask_seq = 3 must be equal"):
        exe.update_dimensions({"seq": 4})
    assert exe.dims == {"batch": 2, "seq": 3, "mask_seq": 3}
    exe.run({"x": np.zeros((2, 3), np.float32), "mask": np.zeros((2, 3), np.int64)})
    assert last_run(exe) == records


@pytest.mark.parametrize("dims, error, fragment", [
    ({"sequence": 3}, DimensionError, "'sequence'"),
    ({"seq": -1}, DimensionError, "'seq'"),
    ({"seq": 2.5}, DimensionError, "'seq'"),
    ({"seq": True}, DimensionError, "'seq'"),
    ({"seq": 4, "nope": 1}, DimensionError, "'nope'"),
    ({"seq": 2**28}, DeviceError, "max storage binding"),
])
def test_bad_updates_raise_and_leave_the_executor_usable(dims, error, fragment):
    compiled = compile_model(encoder_model(), {"batch": 2, "seq": 8})
    exe = null_executor(compiled)
    exe.run(encoder_feeds(2, 8))
    before, buffers, uploads = last_run(exe), dict(exe.buffers), exe.backend.param_uploads
    with pytest.raises(error) as info:
        exe.update_dimensions(dims)
    assert fragment in str(info.value)
    assert exe.dims == {"batch": 2, "seq": 8}
    assert exe.buffers == buffers and exe.stats.reallocs == 0 and exe.backend.param_uploads == uploads
    exe.run(encoder_feeds(2, 8))
    assert last_run(exe) == before
    exe.update_dimensions({"seq": 4})
    fresh = null_executor(compile_model(encoder_model(), {"batch": 2, "seq": 4}))
    exe.run(encoder_feeds(2, 4))
    fresh.run(encoder_feeds(2, 4))
    assert last_run(exe) == last_run(fresh)


class FailingBackend(NullBackend):
    """Once armed, refuses to compile a program, or allocates one buffer and then runs out."""

    fail_program = False
    fail_alloc = False

    def program(self, spec, code, layout, transport):
        if self.fail_program:
            raise ShaderError(f"shader '{spec.label}' failed to compile: armed to fail")
        return super().program(spec, code, layout, transport)

    def alloc(self, label, nbytes):
        if self.fail_alloc and self.allocations[-1].label.startswith("armed:"):
            raise DeviceError(f"out of memory allocating '{label}'")
        return super().alloc(("armed:" if self.fail_alloc else "") + label, nbytes)


@pytest.mark.parametrize("failure", ["program", "alloc"])
def test_a_failing_recompile_or_allocation_leaves_the_old_state(failure):
    model = static_dims_model()
    compiled = compile_model(model, {"batch": 2, "seq": 4}, static=["seq"])
    backend = FailingBackend()
    exe = PlanReplay(compiled, backend)
    feeds = {"x": np.zeros((2, 4, 8), np.float32), "pos": np.zeros((4, 8), np.float32),
             "v": np.zeros((2, 4), np.float32)}
    exe.run(feeds)
    before, code, buffers, live = last_run(exe), program_code(exe), dict(exe.buffers), backend.live_bytes
    setattr(backend, f"fail_{failure}", True)
    with pytest.raises((ShaderError, DeviceError)):
        exe.update_dimensions({"seq": 9})  # recompiles and grows buffers
    assert exe.dims == {"batch": 2, "seq": 4}
    assert program_code(exe) == code and exe.buffers == buffers
    assert backend.live_bytes == live, "a buffer allocated before the failure is freed again"
    assert exe.stats.recompiles == exe.stats.reallocs == exe.stats.dimension_updates == 0
    exe.run(feeds)
    assert last_run(exe) == before
    setattr(backend, f"fail_{failure}", False)
    exe.update_dimensions({"seq": 9})
    assert exe.stats.recompiles == len(baking(compiled, "seq"))


def test_bad_feeds_are_named_input_errors():
    exe = null_executor(compile_model(encoder_model(), {"batch": 2, "seq": 8}))
    good = encoder_feeds(2, 8)
    cases = [({**good, "bogus": good["x"]}, "bogus"), ({"x": good["x"]}, "ids"),
             ({**good, "x": good["x"][:, :7]}, "call update_dimensions"),
             ({**good, "ids": good["ids"].astype(np.float32)}, "'ids' has dtype float32"),
             ({**good, "ids": np.full((2, 8), 2**40, np.int64)}, "'ids'")]
    for feeds, fragment in cases:
        with pytest.raises(InputError, match=fragment):
            exe.run(feeds)
    with pytest.raises(InputError, match="'nothing'"):
        exe.run(good, outputs=["nothing"])
    assert list(exe.run(good, outputs=["shp"])) == ["shp"]


# ---- transports, grid folding, device tensors ---------------------------------------------

def test_both_transports_encode_the_same_parameters():
    compiled = compile_model(gpt2_block(layers=1), {"batch": 1, "seq": 8})
    runs = {}
    for transport in TRANSPORTS:
        exe = null_executor(compiled, transport=transport)
        assert exe.transport == transport and exe.transport == str(transport)
        exe.update_dimensions({"seq": 3})
        exe.run(gpt2_feeds({"batch": 1, "seq": 3}))
        runs[transport] = last_run(exe)
    assert runs[IMMEDIATE] == runs[UNIFORM]


def test_shaders_with_too_many_parameters_for_push_constants_take_the_uniform_buffer():
    compiled = compile_model(gpt2_block(layers=1), {"batch": 1, "seq": 8})
    limit = 8  # bytes: two parameter words
    exe = null_executor(compiled, limits=dataclasses.replace(NULL_LIMITS, max_immediate_bytes=limit))
    expected = [UNIFORM if s.immediate_bytes > limit else IMMEDIATE for s in compiled.shaders]
    assert UNIFORM in expected and IMMEDIATE in expected
    assert exe.shader_transport == expected
    for index, program in exe.programs.items():
        assert program.transport == expected[index]
        assert ("var<uniform> params" in program.code) == (expected[index] == UNIFORM and
                                                          bool(compiled.shaders[index].immediates))
    reference = null_executor(compiled, transport=UNIFORM)
    exe.run(gpt2_feeds({"batch": 1, "seq": 8}))
    reference.run(gpt2_feeds({"batch": 1, "seq": 8}))
    assert last_run(exe) == last_run(reference)


def test_long_grids_fold_into_two_dimensions_within_the_limit():
    compiled = compile_model(encoder_model(), {"batch": 2, "seq": 8})
    limit = 2
    exe = null_executor(compiled, limits=dataclasses.replace(NULL_LIMITS, max_workgroups=limit))
    exe.update_dimensions({"seq": 20})
    exe.run(encoder_feeds(2, 20))  # the null backend asserts every count is within the limit
    cmds = exe.dispatch_commands()  # a Select's chosen alternative only
    raw = [tuple(SymDim.evaluate(v, exe.dims) if isinstance(v, SymDim) else v for v in d.step.workgroups)
           for d in cmds]
    folded = [d.workgroups for d in cmds]
    assert any(rx > limit for rx, _, _ in raw), "the test needs a grid longer than the limit"
    for (x, y, z), (rx, ry, rz) in zip(folded, raw):
        if rx > limit and ry == 1:  # covers every workgroup of the flat grid, within the limit
            assert x * y >= rx and x <= limit and y <= limit and z == rz
        else:
            assert (x, y, z) == (rx, ry, rz)


def test_device_outputs_are_device_tensors_that_feed_inputs():
    model = make_model([h.make_node("MatMul", ["x", "W"], ["xw"]), h.make_node("Add", ["state", "xw"], ["new_state"])],
                       [("x", np.float32, ["batch", 3]), ("state", np.float32, ["batch", 4])], ["new_state"],
                       {"W": np.ones((3, 4), np.float32)})
    exe = null_executor(compile_model(model, {"batch": 2}))
    state = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = exe.run({"x": np.zeros((2, 3), np.float32), "state": state}, outputs=[], device_outputs=["new_state"])
    dev = out["new_state"]
    assert isinstance(dev, DeviceTensor) and dev.shape == (2, 4) and dev.dtype == "float32"
    assert exe.stats.readback_bytes == 0
    # Fed back into an input, the device tensor is copied into the input's buffer by the run.
    np.testing.assert_array_equal(exe.read_tensor(exe.device_tensor("state")), state)
    exe.backend.copyin(dev.buffer, np.full(8, 7, np.float32))
    exe.run({"x": np.zeros((2, 3), np.float32), "state": dev}, outputs=[])
    np.testing.assert_array_equal(exe.read_tensor(exe.device_tensor("state")), np.full((2, 4), 7, np.float32))
    exe.update_dimensions({"batch": 3})
    assert exe.device_tensor("new_state").shape == (3, 4)
    with pytest.raises(InputError, match="'state'"):
        exe.run({"x": np.zeros((3, 3), np.float32), "state": dev})
