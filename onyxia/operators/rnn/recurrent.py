"""RNN, GRU and LSTM: one family, planned as a host loop over the time steps (a LoopStep).

Before the loop, one batched product gives X @ W^T for every step and direction (the matmul
family's kernels). Each step then runs the recurrent product H_{t-1} @ R^T for both directions
at once (a batched matmul over the state [D, B, H]) and the fused gate kernel
(shaders/rnn/cell.wgsl), which adds the biases and peepholes, applies the activations and clip
and updates the state in place; GRU without linear_before_reset adds a reset pass and a second
product ((r * H) @ R^T). The step number reaches the kernel through the loop's counter, so the
trip count is the sequence length — static or a symbolic dim, never read back — and the run is
one submission. Semantics follow onnxruntime: gate orders (iofc, zrh), activation alpha/beta
consumed in order by the activations that take them, zero Y rows past a sequence's length,
reverse steps over each sequence's own length, a zero final state for an empty sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import Buf, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.control.control import permute_copy
from onyxia.operators.indexing.indexing import copy_elements, fill_code
from onyxia.operators.matmul.matmul import Product, plan_product
from onyxia.plan import LoopStep, Step

# name -> (WGSL expression in x, alpha default, beta default); None: the function takes none.
ACTIVATIONS: dict[str, tuple[str, float | None, float | None]] = {
    "relu": ("max(x, 0.0)", None, None),
    "tanh": ("onyxia_tanh(x)", None, None),
    "sigmoid": ("onyxia_sigmoid(x)", None, None),
    "affine": ("ALPHA * x + BETA", 0.0, 0.0),
    "leakyrelu": ("select(ALPHA * x, x, x >= 0.0)", 0.01, None),
    "thresholdedrelu": ("select(0.0, x, x > ALPHA)", 0.0, None),
    "scaledtanh": ("ALPHA * onyxia_tanh(BETA * x)", 0.0, 0.0),
    "hardsigmoid": ("clamp(ALPHA * x + BETA, 0.0, 1.0)", 0.2, 0.5),
    "elu": ("select(ALPHA * (exp(x) - 1.0), x, x >= 0.0)", 1.0, None),
    "softsign": ("x / (1.0 + abs(x))", None, None),
    "softplus": ("onyxia_softplus(x)", None, None),
}


@dataclass(frozen=True)
class Cell:
    """What differs between the three ops."""

    code: int  # CELL in cell.wgsl
    gates: int
    activations: tuple[str, ...]  # defaults per direction (f, g, h)
    states: int  # H, or H and C


CELLS = {"RNN": Cell(0, 1, ("Tanh",), 1), "GRU": Cell(1, 3, ("Sigmoid", "Tanh"), 1),
         "LSTM": Cell(2, 4, ("Sigmoid", "Tanh", "Tanh"), 2)}


@dataclass(frozen=True)
class Layout:
    seq: Dim
    batch: Dim
    inputs: Dim
    hidden: int
    directions: int
    layout: int


def _literal(v: float) -> str:
    text = repr(float(v))
    return text if "." in text or "e" in text else text + ".0"


class Recurrent(Operator):
    """RNN-7/14, GRU-7/14, LSTM-7/14 (layout from 14); inputs X, W, R, B, sequence_lens,
    initial_h (and LSTM: initial_c, P); outputs Y, Y_h (and LSTM: Y_c)."""

    def __init__(self, op_type: str):
        self.op_type = op_type
        self.cell = CELLS[op_type]

    def _layout(self, ctx: InferenceCtx) -> Layout:
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.fail(f"attribute 'direction' must be forward, reverse or bidirectional, got {direction!r}")
        dirs = 2 if direction == "bidirectional" else 1
        layout = int(ctx.attr("layout", 0))
        if layout not in (0, 1):
            raise ctx.fail(f"attribute 'layout' must be 0 or 1, got {layout}")
        x = ctx.input_shape(0)
        if len(x) != 3:
            raise ctx.fail(f"X must be 3-D, got {list(x)}", 0)
        seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
        w = ctx.input_shape(1)
        hidden = ctx.attr("hidden_size", None)
        if hidden is None:
            if len(w) != 3:
                raise ctx.fail("attribute 'hidden_size' is required when W's shape is not static")
            hidden = ctx.literal(w[1], "W dim 1 (gates x hidden_size, without the attribute)", 1) // self.cell.gates
        hidden = int(hidden)
        g = self.cell.gates * hidden
        for i, name, shape in ((1, "W", (dirs, g, x[2])), (2, "R", (dirs, g, hidden))):
            if not ctx.same_shape(ctx.input_shape(i), shape):
                raise ctx.fail(f"{name} must be {list(shape)}, got {list(ctx.input_shape(i))}", i)
        optional = {3: ("B", (dirs, 2 * g)), 4: ("sequence_lens", (batch,)),
                    5: ("initial_h", (batch, dirs, hidden) if layout else (dirs, batch, hidden))}
        if self.op_type == "LSTM":
            optional |= {6: ("initial_c", optional[5][1]), 7: ("P", (dirs, 3 * hidden))}
        for i, (name, shape) in optional.items():
            if ctx.has_input(i) and not ctx.same_shape(ctx.input_shape(i), shape):
                raise ctx.fail(f"{name} must be {list(shape)}, got {list(ctx.input_shape(i))}", i)
        for i in range(ctx.num_inputs):
            if ctx.has_input(i) and i != 4 and not ctx.input_dtype(i).is_float:
                raise ctx.fail(f"input {i} must be float, got {ctx.input_dtype(i)}", i)
        if ctx.has_input(4) and not ctx.input_dtype(4).is_integer:
            raise ctx.fail(f"sequence_lens must be int32, got {ctx.input_dtype(4)}", 4)
        return Layout(seq, batch, x[2], hidden, dirs, layout)

    def _activations(self, ctx: InferenceCtx, dirs: int) -> str:
        """WGSL act_f/act_g/act_h(d, x): each direction's functions with their alpha/beta."""
        per_dir = len(self.cell.activations)
        names = list(ctx.attr("activations", list(self.cell.activations) * dirs))
        if len(names) != per_dir * dirs:
            raise ctx.fail(f"attribute 'activations' needs {per_dir * dirs} entries ({per_dir} per direction), "
                           f"got {names}")
        alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
        exprs: list[str] = []
        for name in names:
            row = ACTIVATIONS.get(str(name).lower())
            if row is None:
                raise ctx.fail(f"attribute 'activations': unknown function {name!r} (known: "
                               f"{', '.join(sorted(ACTIVATIONS))})")
            expr, alpha, beta = row
            if alpha is not None:
                expr = expr.replace("ALPHA", _literal(alphas.pop(0) if alphas else alpha))
            if beta is not None:
                expr = expr.replace("BETA", _literal(betas.pop(0) if betas else beta))
            exprs.append(expr)
        fns = []
        for k, fn in enumerate(("act_f", "act_g", "act_h")[:per_dir]):
            forward, backward = exprs[k], exprs[per_dir + k] if dirs == 2 else exprs[k]
            fns.append(f"fn {fn}(d: u32, x: f32) -> f32 {{\n    if (d == 0u) {{\n        return {forward};\n    }}\n"
                       f"    return {backward};\n}}")
        return "\n".join(fns)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        lay = self._layout(ctx)
        self._activations(ctx, lay.directions)
        dtype = ctx.input_dtype(0)
        seq, dirs, batch, hidden = lay.seq, lay.directions, lay.batch, lay.hidden
        y = (batch, seq, dirs, hidden) if lay.layout else (seq, dirs, batch, hidden)
        state = (batch, dirs, hidden) if lay.layout else (dirs, batch, hidden)
        return [(dtype, y), (dtype, state), (dtype, state)][:len(ctx.node.outputs)]

    def fold(self, ctx: FoldCtx) -> list | None:
        return None  # constant sequences are rare; the GPU runs them

    def plan(self, ctx: PlanCtx) -> list[Step]:
        lay = self._layout(ctx)
        cell = self.cell
        dirs, batch, seq, hidden = lay.directions, lay.batch, lay.seq, lay.hidden
        if not all(ctx.compute_type(ctx.input_dtype(i), f"input {i}") == "f32"
                   for i in range(ctx.num_inputs) if ctx.has_input(i) and i != 4):
            raise ctx.fail("RNN, GRU and LSTM need float inputs")
        dtype = ctx.input_dtype(0).name  # the state's: computed in f32, stored as the model's
        g = cell.gates * hidden
        units = dirs * batch * hidden
        steps: list[Step] = []
        # X @ W^T for every step and direction: [D, rows, G*H].
        xw = ctx.scratch(dirs * seq * batch * g, "float32", "xw")
        steps += plan_product(ctx, Product(ctx.input(0), ctx.input(1), xw, "f32", seq * batch, g, lay.inputs,
                                           batch_a=(1,), batch_b=(dirs,), batch=(dirs,), trans_b=True))
        # The state: H [D, B, H] (then LSTM's C), from initial_h/initial_c or zeros.
        state = ctx.scratch(cell.states * units, dtype, "state")
        for k, i in enumerate((5, 6)[:cell.states]):
            steps += self._initial(ctx, lay, i, state, k * units)
        counter = ctx.scratch(1, "int32", "step")
        gr = ctx.scratch(dirs * batch * g, "float32", "recurrent")
        body = plan_product(ctx, Product(state, ctx.input(2), gr, "f32", batch, g, hidden, batch_a=(dirs,),
                                         batch_b=(dirs,), batch=(dirs,), trans_b=True))
        reads = [("xw", xw), ("gr", gr)]
        defs: dict[str, object] = {"CELL": cell.code, "G": cell.gates, "LAYOUT1": bool(lay.layout),
                                   "ACTIVATIONS": self._activations(ctx, dirs)}
        direction = ctx.attr("direction", "forward")
        defs["REVERSE0"] = direction == "reverse"
        defs["REVERSE1"] = direction == "bidirectional"
        if ctx.attr("clip", None) is not None:
            defs["CLIP"] = float(ctx.attr("clip"))
        params = {"D": dirs, "B": batch, "H": hidden, "T": seq}
        lbr = bool(ctx.attr("linear_before_reset", 0))
        if self.op_type == "GRU" and not lbr:
            rh = ctx.scratch(units, dtype, "reset_state")
            gh = ctx.scratch(dirs * batch * g, "float32", "reset_recurrent")
            reset_reads = reads + self._optional_reads(ctx, peepholes=False) + [("step", counter), ("state", state)]
            body.append(ctx.dispatch("rnn/cell.wgsl", label="gru_reset", params=params, workgroups=ctx.grid(units),
                                     defs={**defs, "RESET": True, **self._flags(ctx, reset_reads)},
                                     reads=dict(reset_reads), writes={"rh": rh}))
            body += plan_product(ctx, Product(rh, ctx.input(2), gh, "f32", batch, g, hidden, batch_a=(dirs,),
                                              batch_b=(dirs,), batch=(dirs,), trans_b=True))
            reads.append(("gh", gh))
        defs["LBR"] = lbr
        defs["INPUT_FORGET"] = bool(ctx.attr("input_forget", 0))
        reads += self._optional_reads(ctx, peepholes=True) + [("step", counter)]
        writes = [("state", state)]
        has_y = bool(ctx.node.outputs) and _used(ctx, 0)
        if has_y:
            writes.append(("y", ctx.output(0)))
        body.append(ctx.dispatch("rnn/cell.wgsl", label=f"{self.op_type.lower()}_cell", params=params,
                                 workgroups=ctx.grid(units), defs={**defs, "HAS_Y": has_y, **self._flags(ctx, reads)},
                                 reads=dict(reads), writes=dict(writes)))
        steps.append(LoopStep(tuple(body), seq, counter=counter, label=ctx.node.name))
        for k, out in enumerate((1, 2)[:cell.states]):
            if len(ctx.node.outputs) > out and _used(ctx, out):
                steps += self._final(ctx, lay, state, k * units, out)
        return steps

    def _optional_reads(self, ctx: PlanCtx, peepholes: bool) -> list[tuple[str, str]]:
        reads = [("bias", ctx.input(3))] if ctx.has_input(3) else []
        if peepholes and self.op_type == "LSTM" and ctx.has_input(7):
            reads.append(("peep", ctx.input(7)))
        if ctx.has_input(4):
            reads.append(("lens", ctx.input(4)))
        return reads

    @staticmethod
    def _flags(ctx: PlanCtx, reads: list[tuple[str, str]]) -> dict[str, bool]:
        names = {n for n, _ in reads}
        return {"HAS_BIAS": "bias" in names, "HAS_PEEP": "peep" in names, "HAS_LENS": "lens" in names}

    def _initial(self, ctx: PlanCtx, lay: Layout, i: int, state: str, offset: Dim) -> list[Step]:
        """State elements [offset, offset + units) from initial_h / initial_c, or zeros."""
        units = lay.directions * lay.batch * lay.hidden
        dtype = ctx.tensor_dtype(state)
        if not ctx.has_input(i):  # zeros: a fill of this part of the state
            zeros = ctx.scratch(units, dtype.name, f"zero_state_{i}")
            fill = ctx.dispatch("indexing/fill.wgsl", label="fill",
                                params={"N": units, "START": fill_code(ctx, 0, dtype)},
                                reads={}, writes={"y": Buf(zeros, whole_words=True, raw=True)},
                                workgroups=ctx.unit_grid(units, zeros))
            return [fill, *copy_elements(ctx, zeros, state, units, 0, offset)]
        if not lay.layout:
            return copy_elements(ctx, ctx.input(i), state, units, 0, offset)
        tmp = ctx.scratch(units, dtype.name, f"initial_{i}")
        return [*permute_copy(ctx, ctx.input(i), (lay.batch, lay.directions, lay.hidden), [1, 0, 2], tmp),
                *copy_elements(ctx, tmp, state, units, 0, offset)]

    def _final(self, ctx: PlanCtx, lay: Layout, state: str, offset: Dim, out: int) -> list[Step]:
        """Output `out` (Y_h / Y_c) from state elements [offset, offset + units)."""
        units = lay.directions * lay.batch * lay.hidden
        if not lay.layout:
            return copy_elements(ctx, state, ctx.output(out), units, offset, 0)
        tmp = ctx.scratch(units, ctx.tensor_dtype(state).name, f"final_{out}")
        return [*copy_elements(ctx, state, tmp, units, offset, 0),
                *permute_copy(ctx, tmp, (lay.directions, lay.batch, lay.hidden), [1, 0, 2], ctx.output(out))]


def _used(ctx: PlanCtx, out: int) -> bool:
    name = ctx.node.outputs[out]
    return name in ctx.graph.outputs or bool(ctx.graph.consumers(name))


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Recurrent(op), 7) for op in ("RNN", "GRU", "LSTM")]


__all__ = ["ACTIVATIONS", "CELLS", "Recurrent", "numel"]
