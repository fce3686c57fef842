"""Step kinds are open: a new kind is one Step subclass (plan/steps.py) plus one command class
(runtime/commands.py); it plans, saves, loads and replays. Copies size with the dims; a step
kind no runtime command replays is a PlanError."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.errors import PlanError
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.shapes import SymDim, numel
from onyxia.operators import Operator, core_operator_registry
from onyxia.plan import CompiledModel, Expr, PlannedOp, Step
from onyxia.runtime.commands import Command, replays
from onyxia.runtime.null import CopyRecord, null_executor
from onyxia.runtime.replay import PlanReplay
from tests.builders.replay import encoder_model
from tests.helpers import compile_model, make_model


def last_run(exe: PlanReplay) -> list:
    """The records of the null backend's last run."""
    return exe.backend.runs[-1]

ONYXIA = Path(onyxia.__file__).parent


# ---- a new step kind is one Step class plus one command class ------------------------------

@dataclasses.dataclass(frozen=True)
class HostFill(Step, tag="test.host_fill"):
    """`count` copies of `value` written into `dst` from the host (a stand-in for the host-side
    steps control flow will add). Nothing outside this class and HostFillCommand knows it."""

    written_at_load: ClassVar[bool] = True

    dst: str
    count: Expr
    value: float

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.dst, True),)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return (("fill", 0, self.count),)

    def to_json(self) -> dict:
        return {"t": self.tag, "dst": self.dst, "count": str(self.count), "value": self.value}

    @classmethod
    def from_json(cls, d: dict) -> HostFill:
        return cls(d["dst"], parse_dim(d["count"]), float(d["value"]))


@replays(HostFill)
class HostFillCommand(Command):
    __slots__ = ("step", "count")
    per_run = False

    def __init__(self, step: HostFill, index: int, replay: PlanReplay) -> None:
        super().__init__(step, index, replay)
        self.step, self.count = step, 0

    def refresh(self, replay: PlanReplay) -> None:
        self.count = SymDim.evaluate(self.step.count, replay.dims) if isinstance(self.step.count, SymDim) \
            else self.step.count
        self.settle(replay)

    def set(self, kind: str, index: int, value: int) -> None:
        self.count = value

    def settle(self, replay: PlanReplay) -> None:
        data = np.full(self.count, self.step.value, np.float32)
        replay.backend.copyin(replay.buffers[replay.root(self.step.dst)], data)


class FillLike(Operator):
    """y = a tensor shaped like x, every element `value`; planned as one HostFill step."""

    op_type = "FillLike"
    domain = "test.replay"

    def infer(self, ctx):
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def plan(self, ctx):
        return [HostFill(ctx.output(0), numel(ctx.output_shape(0)), float(ctx.attr("value", 0.0)))]


def test_a_new_step_kind_plans_saves_loads_and_replays(tmp_path):
    model = make_model([h.make_node("FillLike", ["x"], ["y"], domain="test.replay", value=2.5)],
                       [("x", np.float32, ["n", 3])], ["y"], extra_opsets={"test.replay": 1})
    registry = core_operator_registry().register(FillLike(), 1)
    compiled = CompilerPipeline(registry).compile(onyxia.load_model(model), {"n": 2})
    assert [type(s) for s in compiled.steps] == [HostFill]
    assert [(b.kind, b.target, str(b.expr)) for b in compiled.symbolic_bindings if b.kind == "fill"] == \
        [("fill", 0, "3 * n")]
    compiled.save(tmp_path / "fill.onyxia")
    loaded = CompiledModel.load(tmp_path / "fill.onyxia")
    assert loaded.steps == compiled.steps
    exe = null_executor(loaded)
    for n in (2, 1, 7):  # 7: past capacity, a new buffer filled again
        exe.update_dimensions({"n": n})
        np.testing.assert_array_equal(exe.run({"x": np.zeros((n, 3), np.float32)})["y"],
                                      np.full((n, 3), 2.5, np.float32))
    assert exe.stats.reallocs == 2  # x and y grew


# ---- copies -----------------------------------------------------------------------------------

class DropFirstRow(Operator):
    """y = x[1:] for x [n, 4], planned as one CopyBuffer whose size is symbolic."""

    op_type = "DropFirstRow"
    domain = "test.replay"

    def infer(self, ctx):
        n, cols = ctx.input_shape(0)
        return [(ctx.input_dtype(0), (n - 1, cols))]

    def plan(self, ctx):
        n, cols = ctx.input_shape(0)
        return [ctx.copy(ctx.input(0), ctx.output(0), (n - 1) * cols * 4, src_offset=cols * 4)]


def test_copy_sizes_follow_the_dimensions():
    model = make_model([h.make_node("DropFirstRow", ["x"], ["t"], domain="test.replay"),
                        h.make_node("Neg", ["t"], ["y"])],
                       [("x", np.float32, ["n", 4])], ["t", "y"], extra_opsets={"test.replay": 1})
    registry = core_operator_registry().register(DropFirstRow(), 1)

    def compiled_for(n: int) -> CompiledModel:
        return CompilerPipeline(registry).compile(onyxia.load_model(model), {"n": n})

    exe = null_executor(compiled_for(3))
    for n in (3, 6, 1, 2):
        exe.update_dimensions({"n": n})
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        np.testing.assert_array_equal(exe.run({"x": x})["t"], x[1:])  # the null backend copies for real
        fresh = null_executor(compiled_for(n))
        fresh.run({"x": x})
        assert last_run(exe) == last_run(fresh)
        copies = [r for r in last_run(exe) if isinstance(r, CopyRecord)]
        assert copies == ([CopyRecord("x", "t", (n - 1) * 16, 16, 0)] if n > 1 else [])  # empty: skipped


@dataclasses.dataclass(frozen=True)
class Unreplayable(Step, tag="test.unreplayable"):
    """A step kind with no command class: the runtime must refuse it by name."""

    dst: str

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.dst, True),)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return ()


def test_a_step_kind_without_a_command_is_a_plan_error():
    compiled = compile_model(encoder_model(), {"batch": 2, "seq": 8})
    extra = PlannedOp("odd", "Odd", (Unreplayable("y"),))
    with pytest.raises(PlanError, match=f"step {len(compiled.steps)} is a Unreplayable, which this runtime cannot"):
        null_executor(dataclasses.replace(compiled, operations=(*compiled.operations, extra)))
