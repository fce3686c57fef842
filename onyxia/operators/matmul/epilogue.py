"""Fused elementwise epilogues of matrix products (passes/epilogue_fusion.py builds them).

A product node that absorbed the elementwise ops reading its output carries the program of a
FusedElementwise node (operators/elementwise/fused.py) as attributes: `epilogue_exprs`, one WGSL
expression per op over `x0, x1, ...` and the earlier values `v0, v1, ...`, and
`epilogue_inputs`, per `x`: -1 for the product's own value, else the node input holding that
operand. `fused_epilogue` turns them into the defs of the kernels' epilogue functions
(shaders/matmul/epilogue.wgsl, shaders/quantized/epilogue.wgsl): EPILOGUE_LOADS reads every
operand at the output element being stored, EPILOGUE_BODY evaluates the values in f32, and
EPILOGUE_EXPR is the result, rounded when the kernel stores it (the matmul kernels apply it to
the product as they stored it, the MatMulNBits kernels to their float32 accumulator).

Operands broadcast to the product's output shape (the pass checked it). Each is read through
the cheapest index that fits: a scalar at 0, the full output shape at the output's flat index
`o`, an [N] row (ones before it) at the column `n`, anything else through broadcast strides
over `o` (params E<k>D<j> / E<k>S<j>: baked when static, immediates otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import Buf, InferenceCtx, PlanCtx
from onyxia.operators.common import broadcast_strides, collapse_dims, is_one

EPILOGUE_DEFS = ("EPILOGUE", "EPILOGUE_LOADS", "EPILOGUE_BODY", "EPILOGUE_EXPR")


@dataclass(frozen=True)
class Epilogue:
    """What a product's kernels need to run its fused epilogue: defs, operand buffers (e0,
    e1, ...) and the broadcast operands' index params."""

    defs: dict[str, object] = field(default_factory=dict)
    reads: dict[str, str | Buf] = field(default_factory=dict)
    params: dict[str, Dim] = field(default_factory=dict)
    # The vec4 form (EPILOGUE4, as_quad_pass): its defs, and the operands bound as vec4 arrays
    # (empty where an operand is read through strides).
    defs4: dict[str, object] = field(default_factory=dict)
    reads4: dict[str, str | Buf] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.defs)

    def in_store(self, ctx: PlanCtx, y: str, defs: dict) -> dict[str, object]:
        """EPILOGUE_IN_STORE where a kernel may apply the ops to each value as it stores it:
        the output is float32 (its store rounds nothing, so the value is the stored one) and the
        value is not Gemm's alpha * acc (+ beta * C), whose multiply the driver may contract with
        the ops' first add (fma) where the unfused plan rounds in between. Else the kernel runs
        the ops over its stored outputs (a load and a store more an output)."""
        if self and ctx.tensor_dtype(y).name == "float32" and defs.get("T") == "f32" and not defs.get("GEMM"):
            return {"EPILOGUE_IN_STORE": True}
        return {}

    def as_quad_pass(self, defs: dict, reads: dict) -> tuple[dict, dict]:
        """For a kernel that would apply the ops in its store (EPILOGUE_IN_STORE) storing a vec4
        of one row's columns at a time (STORE4): the ops as a pass over its stored outputs after
        the store instead, a vec4 at a time (EPILOGUE4), each operand read once a quad (a bias row
        at n / 4, a full-shape operand at o / 4). Unchanged where the form does not apply (an
        operand read through strides, not float32)."""
        if not (self.defs4 and defs.get("EPILOGUE_IN_STORE") and defs.get("STORE4")):
            return defs, reads
        return {**{k: v for k, v in defs.items() if k != "EPILOGUE_IN_STORE"}, **self.defs4}, {**reads, **self.reads4}

    def onto(self, defs: dict, params: dict, reads: dict) -> tuple[dict, dict, dict]:
        """The defs, params and reads of the dispatch that stores the product (the kernel
        itself, or its split-K finish), with this epilogue's added."""
        return {**defs, **self.defs}, {**params, **self.params}, {**reads, **self.reads}


def spans(ctx: InferenceCtx, shape: Shape, out: Shape) -> bool:
    """Whether an operand of `shape` covers `out` without broadcasting. A literal 1 against a
    symbol that is 1 only at these dims (a batch, decode's one row) broadcasts: same_dim would
    record the symbol = 1 in the plan's constraints, and the plan would refuse other values."""
    return len(shape) == len(out) and all(is_one(a) == is_one(b) and ctx.same_dim(a, b) for a, b in zip(shape, out))


def operand_index(ctx: PlanCtx, k: int, shape: Shape, out: Shape, flat: str,
                  column: bool = True) -> tuple[str, list[str], dict[str, Dim]]:
    """(index expression, statements defining it, params) reading operand k of `shape`
    broadcast to `out` at the output element whose flat index is `flat` (column `n`, when
    `column`: the kernel's n is the coordinate on out's last axis)."""
    if is_one(numel(shape)):
        return "0u", [], {}
    if spans(ctx, shape, out):
        return flat, [], {}
    if column and len(shape) >= 1 and spans(ctx, shape[-1:], out[-1:]) and all(is_one(d) for d in shape[:-1]):
        return "n", [], {}
    dims, (strides,) = collapse_dims(out, [broadcast_strides(shape, out)])
    params: dict[str, Dim] = {}
    lines = [f"var e{k}_i = 0u;", f"var e{k}_r = {flat};"]
    for j, axis in enumerate(reversed(range(len(dims)))):  # innermost axis first
        outermost = axis == 0  # what is left of the index is its coordinate: no % or / needed
        coord = f"e{k}_r" if outermost else f"(e{k}_r % E{k}D{j}())"
        if not (isinstance(strides[axis], int) and strides[axis] == 0):
            params[f"E{k}S{j}"] = strides[axis]
            lines.append(f"e{k}_i += {coord} * E{k}S{j}();")
        if not outermost:
            params[f"E{k}D{j}"] = dims[axis]
            lines.append(f"e{k}_r = e{k}_r / E{k}D{j}();")
    return f"e{k}_i", lines, params


def fused_epilogue(ctx: PlanCtx, out: Shape, flat: str = "o", column: bool = True) -> Epilogue:
    """The node's `epilogue_exprs` / `epilogue_inputs` as kernel defs (see the module doc);
    `flat` is the WGSL expression of the output element's flat index in the epilogue function.
    `column`: the kernels' `n` is the output's last coordinate (matrix products; a convolution's
    kernels have no such coordinate and read every broadcast operand through strides)."""
    exprs = list(ctx.attr("epilogue_exprs", []))
    if not exprs:
        return Epilogue()
    loads: list[str] = []
    reads: dict[str, str | Buf] = {}
    params: dict[str, Dim] = {}
    # the vec4 form: loads of whole quads (w<k>), and each lane's arguments x<k> of the scalar body
    loads4: list[str] = []
    lanes: list[list[str]] = [[], [], [], []]
    reads4: dict[str, str | Buf] = {}
    quads = column and flat == "o" and isinstance(out[-1], int) and out[-1] % 4 == 0 if out else False
    for k, i in enumerate(ctx.attr("epilogue_inputs")):
        if i < 0:
            loads.append(f"let x{k} = v;")
            for j, lane in enumerate(lanes):
                lane.append(f"v4.{'xyzw'[j]}")
            continue
        index, lines, index_params = operand_index(ctx, k, ctx.input_shape(i), out, flat, column)
        loads += lines
        loads.append(f"let x{k} = f32(e{k}_load({index}));")
        reads[f"e{k}"] = ctx.input(i)
        params.update(index_params)
        if index in ("o", "n") and ctx.input_dtype(i).name == "float32":
            loads4.append(f"let w{k} = e{k}_load4({index} / 4u);")
            reads4[f"e{k}"] = Buf(ctx.input(i), vector=True)
            for j, lane in enumerate(lanes):
                lane.append(f"w{k}.{'xyzw'[j]}")
        elif index == "0u":
            loads4.append(f"let w{k} = f32(e{k}_load(0u));")
            for lane in lanes:
                lane.append(f"w{k}")
        else:
            quads = False
    body = " ".join(f"let v{j} = {e};" for j, e in enumerate(exprs))
    result = f"v{len(exprs) - 1}"
    defs4: dict[str, object] = {}
    if quads:
        count = len(lanes[0])
        calls = ", ".join(f"matmul_epilogue_lane({', '.join(lane)})" for lane in lanes)
        defs4 = {"EPILOGUE4": True, "EPILOGUE_LOADS4": " ".join(loads4),
                 "EPILOGUE_ARGS": ", ".join(f"x{k}: f32" for k in range(count)),
                 "EPILOGUE_CALL4": f"vec4<f32>({calls})"}
    return Epilogue({"EPILOGUE": True, "EPILOGUE_LOADS": " ".join(loads), "EPILOGUE_BODY": body,
                     "EPILOGUE_EXPR": result}, reads, params, defs4, reads4)


__all__ = ["EPILOGUE_DEFS", "Epilogue", "fused_epilogue", "operand_index", "spans"]
