"""Row-wise normalizations: Softmax/LogSoftmax and the LayerNorm family (one table row per op).

Every op here normalizes rows of K elements and runs shaders/normalization/rownorm.wgsl: one
pass gathers two statistics per row (online max + sum of exp for softmax; shifted sums of d
and d² for LayerNorm/RMSNorm), a second pass writes. Row counts and lengths are params, so
batch, sequence and even hidden sizes may be dynamic.

The LayerNorm family (ONNX LayerNormalization, onnxruntime's SimplifiedLayerNormalization
(RMSNorm) and the com.microsoft Skip* forms used by exported LLMs) differ only in which inputs
and outputs they have: a row of NORM_OPS names them by role.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, SymDim, numel
from onyxia.operators.base import WORKGROUP_SIZE, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.reduction import lanes_for
from onyxia.plan import Step

READ_ROLES = ("skip", "bias", "scale", "beta")  # binding order after x
WRITE_ROLES = ("y", "mean_out", "inv_out", "sum_out")


def plan_rows(ctx: PlanCtx, out: str, rows: Dim, k: Dim, *, inner: Dim = 1, eps: float = 0.0,
              reads: dict[str, int] | None = None, writes: dict[str, int] | None = None,
              counts: dict[str, Dim] | None = None) -> list[Step]:
    """One rownorm.wgsl dispatch. `reads`/`writes` map roles to this node's input/output
    indices; `counts` gives the element count of operands indexed modulo their size."""
    if isinstance(rows, int) and rows == 0:
        return []
    reads, writes = reads or {}, writes or {"y": 0}
    for i in (0, *reads.values()):
        ctx.device_type(ctx.input_dtype(i), f"input {i}")
        if not ctx.input_dtype(i).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(i)}", i)
    lanes = lanes_for(rows, k, True)
    strided = not (isinstance(inner, int) and inner == 1)
    defs: dict[str, object] = {"LANES": lanes, "OUT": out, "STATS": "online" if "softmax" in out else "moments",
                               "STRIDED": strided}
    params: dict[str, object] = {"ROWS": rows, "K": k}
    if strided:
        params["INNER"] = inner
    if out in ("layernorm", "rmsnorm"):
        params["EPS"] = float(eps)
    read_names, write_names = [ctx.input(0)], []
    for role in READ_ROLES:
        if role in reads:
            defs[role.upper()], defs[f"B_{role.upper()}"] = True, len(read_names)
            read_names.append(ctx.input(reads[role]))
    for role in WRITE_ROLES:
        if role in writes:
            defs[role.upper()], defs[f"B_{role.upper()}"] = True, len(read_names) + len(write_names)
            write_names.append(ctx.output(writes[role]))
    params.update({f"{role.upper()}_N": n for role, n in (counts or {}).items()})
    return [ctx.dispatch("normalization/rownorm.wgsl", label=f"rownorm_{out}", defs=defs, params=params,
                         reads=read_names, writes=write_names, workgroups=ctx.grid(rows, WORKGROUP_SIZE // lanes))]


# ---- Softmax / LogSoftmax -----------------------------------------------------------------

def _softmax(x: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    xf = x.astype(np.float64)
    shifted = xf - np.max(xf, axis=axes, keepdims=True)
    lse = np.log(np.sum(np.exp(shifted), axis=axes, keepdims=True))
    return shifted - lse if log else np.exp(shifted - lse)


class Softmax(Operator):
    """Softmax / LogSoftmax. Before opset 13 the input is viewed as 2-D at `axis` (default 1)
    and rows are the flattened trailing dims; from 13 on, one axis (default -1), which may be
    strided."""

    def __init__(self, op_type: str, legacy: bool):
        self.op_type, self.legacy = op_type, legacy
        self.log = op_type == "LogSoftmax"

    def axis_of(self, ctx: InferenceCtx, rank: int) -> int:
        return ctx.axis(ctx.attr("axis", 1 if self.legacy else -1), rank)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        shape = ctx.input_shape(0)
        self.axis_of(ctx, len(shape))
        return [(ctx.input_dtype(0), shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0]
        axis = self.axis_of(ctx, x.ndim)
        axes = tuple(range(axis, x.ndim)) if self.legacy else (axis,)
        with np.errstate(all="ignore"):
            return [ctx.cast_output(_softmax(x, axes, self.log))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        axis = self.axis_of(ctx, len(shape))
        out = "logsoftmax" if self.log else "softmax"
        if self.legacy:
            return plan_rows(ctx, out, numel(shape[:axis]), numel(shape[axis:]))
        inner = numel(shape[axis + 1:])
        return plan_rows(ctx, out, numel(shape[:axis]) * inner, shape[axis], inner=inner)


# ---- the LayerNorm family -----------------------------------------------------------------

@dataclass(frozen=True)
class NormRow:
    """Inputs and outputs by role, in the op's positional order."""

    rms: bool  # RMSNorm: no mean subtracted
    inputs: tuple[str, ...]  # roles: x, skip, scale, beta, bias (bias is added to x + skip)
    outputs: tuple[str, ...]  # roles: y, mean_out, inv_out, sum_out
    epsilon: float  # default of the epsilon attribute
    axis_attr: bool  # normalizes shape[axis:] (attribute, default -1); else the last axis


NORM_OPS: dict[tuple[str, str], NormRow] = {
    ("", "LayerNormalization"): NormRow(False, ("x", "scale", "beta"), ("y", "mean_out", "inv_out"), 1e-5, True),
    ("", "SimplifiedLayerNormalization"): NormRow(True, ("x", "scale"), ("y", "inv_out"), 1e-5, True),
    ("", "RMSNormalization"): NormRow(True, ("x", "scale"), ("y",), 1e-5, True),
    ("com.microsoft", "SkipLayerNormalization"): NormRow(
        False, ("x", "skip", "scale", "beta", "bias"), ("y", "mean_out", "inv_out", "sum_out"), 1e-12, False),
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): NormRow(
        True, ("x", "skip", "scale", "bias"), ("y", "mean_out", "inv_out", "sum_out"), 1e-12, False),
}


def _broadcasts_as_suffix(shape: Shape, target: Shape) -> bool:
    """`shape` without leading 1s equals the trailing dims of `target`: then element j of a
    row of `target` reads element j % numel(shape). A symbolic dim matches any dim (the model
    promises they agree)."""
    dims = list(shape)
    while dims and isinstance(dims[0], int) and dims[0] == 1:
        dims.pop(0)
    tail = target[len(target) - len(dims):]
    return len(dims) <= len(target) and all(a == b or isinstance(a, SymDim) or isinstance(b, SymDim)
                                            for a, b in zip(dims, tail))


class LayerNorm(Operator):
    """LayerNormalization, SimplifiedLayerNormalization (RMSNorm) and the com.microsoft
    SkipLayerNormalization / SkipSimplifiedLayerNormalization. Statistics are computed in f32
    (stash_type 1) whatever the input type; optional outputs are written only when present."""

    def __init__(self, op_type: str, row: NormRow, domain: str = ""):
        self.op_type, self.row, self.domain = op_type, row, domain

    def roles_in(self, ctx: InferenceCtx) -> dict[str, int]:
        return {role: i for i, role in enumerate(self.row.inputs) if ctx.has_input(i)}

    def roles_out(self, ctx: InferenceCtx) -> dict[str, int]:
        outs = ctx.node.outputs
        return {role: i for i, role in enumerate(self.row.outputs) if i < len(outs) and outs[i]}

    def axis_of(self, ctx: InferenceCtx, rank: int) -> int:
        return ctx.axis(ctx.attr("axis", -1), rank) if self.row.axis_attr else rank - 1

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if len(ctx.node.outputs) > len(self.row.outputs):
            raise ctx.fail(f"has {len(ctx.node.outputs)} outputs, {self.op_type} has at most {len(self.row.outputs)}")
        x_dtype, shape = ctx.input_dtype(0), ctx.input_shape(0)
        if not x_dtype.is_float:
            raise ctx.fail(f"expects float input, got {x_dtype}", 0)
        if not shape:
            raise ctx.fail("input must have rank >= 1", 0)
        roles = self.roles_in(ctx)
        if "scale" not in roles:
            raise ctx.fail("scale (gamma) is required", self.row.inputs.index("scale"))
        axis = self.axis_of(ctx, len(shape))
        for role, i in roles.items():
            if role == "x":
                continue
            target = shape if role == "skip" else shape[axis:]
            if not ctx.input_dtype(i).is_float:
                raise ctx.fail(f"{role} must be float, got {ctx.input_dtype(i)}", i)
            if not _broadcasts_as_suffix(ctx.input_shape(i), target):
                raise ctx.fail(f"{role} shape {list(map(str, ctx.input_shape(i)))} must equal the trailing dims "
                               f"{list(map(str, target))} (leading 1s allowed)", i)
        stats = tuple(shape[:axis]) + (1,) * (len(shape) - axis)
        result = {"y": (x_dtype, shape), "mean_out": (dtypes.FLOAT32, stats), "inv_out": (dtypes.FLOAT32, stats),
                  "sum_out": (x_dtype, shape)}
        return [result[role] for role in self.row.outputs[:len(ctx.node.outputs)]]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        v = {role: vals[i].astype(np.float64) for role, i in self.roles_in(ctx).items()}
        x = v["x"] + v.get("skip", 0.0) + v.get("bias", 0.0)
        axes = tuple(range(self.axis_of(ctx, x.ndim), x.ndim))
        eps = float(ctx.attr("epsilon", self.row.epsilon))
        mean = np.zeros(x.shape[:axes[0]] + (1,) * len(axes)) if self.row.rms else np.mean(x, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(np.square(x - mean), axis=axes, keepdims=True) + eps)
        y = (x - mean) * inv * v["scale"] + v.get("beta", 0.0)
        result = {"y": y, "mean_out": mean, "inv_out": inv, "sum_out": x}
        return [ctx.cast_output(result[role], i) for i, role in enumerate(self.row.outputs[:len(ctx.node.outputs)])]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        axis = self.axis_of(ctx, len(shape))
        reads = {role: i for role, i in self.roles_in(ctx).items() if role != "x"}
        counts = {role: numel(ctx.input_shape(i)) for role, i in reads.items() if role != "bias"}
        return plan_rows(ctx, "rmsnorm" if self.row.rms else "layernorm", numel(shape[:axis]), numel(shape[axis:]),
                         eps=float(ctx.attr("epsilon", self.row.epsilon)), reads=reads, writes=self.roles_out(ctx),
                         counts=counts)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs. RMSNormalization is standard from opset 23.
    LayerNormalization became standard in opset 17, but
    onnxruntime accepts it (and SimplifiedLayerNormalization) in the default domain from opset
    1 on, so do we; SimplifiedLayerNormalization is also accepted in com.microsoft, where some
    exporters put it."""
    ops: list[tuple[Operator, int]] = []
    for name in ("Softmax", "LogSoftmax"):
        ops += [(Softmax(name, legacy=True), 1), (Softmax(name, legacy=False), 13)]
    for (domain, name), row in NORM_OPS.items():
        ops.append((LayerNorm(name, row, domain), 23 if name == "RMSNormalization" else 1))
    ops.append((LayerNorm("SimplifiedLayerNormalization", NORM_OPS[("", "SimplifiedLayerNormalization")],
                          "com.microsoft"), 1))
    return ops
