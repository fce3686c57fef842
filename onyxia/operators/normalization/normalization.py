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
from onyxia.ir.graph import Node
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import WORKGROUP_SIZE, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.normalization.rowstats import CPU_LANES, CPU_ROW_MIN, by_adapter, in_parts, lane_defs, plan_rows
from onyxia.operators.reduction.reduction import CPU_ROW_GROUP, CPU_ROW_WALK, bound_of, lanes_for, split_axes, walk_code
from onyxia.plan import Step

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


# On a LayerNormalization node (compiler/passes/channel_layernorm.py writes it): the norm is over
# axis 1 of an [N, C, *spatial] input, scale and bias per channel: the LayerNorm2d that exporters
# spell Transpose -> LayerNormalization -> Transpose, read in place.
CHANNELS_ATTR = "onyxia_channels"


def _broadcasts_as_suffix(ctx: InferenceCtx, shape: Shape, target: Shape) -> bool:
    """`shape` without leading 1s equals the trailing dims of `target`: then element j of a
    row of `target` reads element j % numel(shape)."""
    dims = list(shape)
    while dims and isinstance(dims[0], int) and dims[0] == 1:
        dims.pop(0)
    return len(dims) <= len(target) and ctx.same_shape(dims, target[len(target) - len(dims):])


class LayerNorm(Operator):
    """LayerNormalization, SimplifiedLayerNormalization (RMSNorm) and the com.microsoft
    SkipLayerNormalization / SkipSimplifiedLayerNormalization. Statistics are computed in f32
    (stash_type 1) whatever the input type; optional outputs are written only when present.
    LayerNormalization with another stash_type runs as its ONNX function body, which computes
    the statistics in that type (float64 is then refused like any float64 tensor)."""

    def __init__(self, op_type: str, row: NormRow, domain: str = ""):
        self.op_type, self.row, self.domain = op_type, row, domain

    def runs_as_function(self, node: Node) -> bool:
        return node.op_type == "LayerNormalization" and not node.domain and node.attributes.get("stash_type", 1) != 1

    def roles_in(self, ctx: InferenceCtx) -> dict[str, int]:
        return {role: i for i, role in enumerate(self.row.inputs) if ctx.has_input(i)}

    def roles_out(self, ctx: InferenceCtx) -> dict[str, int]:
        outs = ctx.node.outputs
        return {role: i for i, role in enumerate(self.row.outputs) if i < len(outs) and outs[i]}

    def axis_of(self, ctx: InferenceCtx, rank: int) -> int:
        return ctx.axis(ctx.attr("axis", -1), rank) if self.row.axis_attr else rank - 1

    def channels(self, ctx: InferenceCtx) -> bool:
        """A norm over axis 1 (CHANNELS_ATTR), only Y written."""
        if not ctx.attr(CHANNELS_ATTR, 0):
            return False
        if self.row.rms or "skip" in self.row.inputs or len([o for o in ctx.node.outputs if o]) != 1:
            raise ctx.fail(f"{CHANNELS_ATTR} needs a LayerNormalization with one output")
        if len(ctx.input_shape(0)) < 3:
            raise ctx.fail(f"{CHANNELS_ATTR} needs an [N, C, *spatial] input, got rank {len(ctx.input_shape(0))}", 0)
        return True

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
        channels = self.channels(ctx)
        axis = self.axis_of(ctx, len(shape))
        for role, i in roles.items():
            if role == "x":
                continue
            target = shape if role == "skip" else (shape[1],) if channels else shape[axis:]
            if not ctx.input_dtype(i).is_float:
                raise ctx.fail(f"{role} must be float, got {ctx.input_dtype(i)}", i)
            if not _broadcasts_as_suffix(ctx, ctx.input_shape(i), target):
                raise ctx.fail(f"{role} shape {shape_str(ctx.input_shape(i))} must equal the trailing dims "
                               f"{shape_str(target)} (leading 1s allowed)", i)
        if channels:
            return [(x_dtype, shape)]
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
        if self.channels(ctx):
            per_channel = (1, -1) + (1,) * (x.ndim - 2)
            y = _normalize(x, (1,), eps) * v["scale"].reshape(per_channel)
            return [ctx.cast_output(y + v["beta"].reshape(per_channel) if "beta" in v else y)]
        mean = np.zeros(x.shape[:axes[0]] + (1,) * len(axes)) if self.row.rms else np.mean(x, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(np.square(x - mean), axis=axes, keepdims=True) + eps)
        y = (x - mean) * inv * v["scale"] + v.get("beta", 0.0)
        result = {"y": y, "mean_out": mean, "inv_out": inv, "sum_out": x}
        return [ctx.cast_output(result[role], i) for i, role in enumerate(self.row.outputs[:len(ctx.node.outputs)])]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        if self.channels(ctx):  # per position, C values HW apart, as InstanceNormalization's walk
            spatial = numel(shape[2:])
            mo = Moments((shape[0], shape[1], spatial), {1}, "meanvar", float(ctx.attr("epsilon", self.row.epsilon)),
                         channel_inner=spatial, channel_count=shape[1])
            return plan_moments(ctx, mo, scale=1, bias=2 if ctx.has_input(2) else None)
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
    return ops + channel_operators()


# ---- per-channel normalizations (CNNs) ----------------------------------------------------
#
# BatchNormalization (inference) is a per-channel affine map: shaders/normalization/
# channel_affine.wgsl. InstanceNormalization, GroupNormalization, MeanVarianceNormalization and
# LpNormalization gather statistics over a set of axes that need not be the trailing ones:
# shaders/normalization/moments.wgsl walks them like the reduction kernel (reduction/reduction.py's
# split_axes / walk_code) and applies a per-channel scale and bias on the way out.

def _channel_index(ctx: InferenceCtx, what: str, i: int, count: Dim) -> None:
    """Input i must hold `count` elements (a per-channel parameter)."""
    shape = ctx.input_shape(i)
    if not ctx.same_dim(numel(shape), count):
        raise ctx.fail(f"{what} must have {count} elements, got shape {shape_str(shape)}", i)


class BatchNormalization(Operator):
    """Inference-mode BatchNormalization: y = (x - mean) / sqrt(var + eps) * scale + B per channel.

    Training (training_mode=1, or the running-statistics outputs of opsets < 14) is rejected.
    Opsets < 9 with spatial=0 take per-activation parameters of shape [C, *spatial].
    """

    op_type = "BatchNormalization"

    def counts(self, ctx: InferenceCtx) -> tuple[Dim, Dim]:
        """(elements each parameter covers, parameter count): the channel stride and channels."""
        x = ctx.input_shape(0)
        if len(x) < 2:
            raise ctx.fail(f"expects [N, C, ...], got rank {len(x)}", 0)
        if ctx.attr("training_mode", 0):
            raise ctx.fail("attribute 'training_mode' = 1 (training) is not supported; onyxia runs inference")
        if len([o for o in ctx.node.outputs if o]) > 1:
            raise ctx.fail("the running mean/variance outputs exist only in training mode, which is not supported")
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        inner = numel(x[2:])
        if not ctx.attr("spatial", 1):  # per activation
            return 1, x[1] * inner
        return inner, x[1]

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        _, count = self.counts(ctx)
        for i, what in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
            _channel_index(ctx, what, i, count)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0].astype(np.float64)
        self.counts(ctx)
        shape = (1, -1) + (1,) * (x.ndim - 2) if ctx.attr("spatial", 1) else (1,) + x.shape[1:]
        scale, bias, mean, var = (v.astype(np.float64).reshape(shape) for v in vals[1:5])
        eps = float(ctx.attr("epsilon", 1e-5))
        return [ctx.cast_output((x - mean) / np.sqrt(var + eps) * scale + bias)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        inner, count = self.counts(ctx)
        total = numel(ctx.input_shape(0))
        return [ctx.dispatch("normalization/channel_affine.wgsl", label="batchnorm",
                             params={"TOTAL": total, "INNER": inner, "C": count,
                                     "EPS": float(ctx.attr("epsilon", 1e-5))},
                             reads=dict(zip(("x", "scale", "bias", "mean", "variance"), map(ctx.input, range(5)))),
                             writes={"y": ctx.output(0)},
                             workgroups=ctx.grid(total))]


@dataclass(frozen=True)
class Moments:
    """One statistics-normalization over `reduced` axes of a contiguous view `shape` of x."""

    shape: Shape
    reduced: set[int]
    out: str  # meanvar | lp1 | lp2
    eps: float = 0.0
    eps_outside: bool = False  # (x - mean) / (sqrt(var) + eps) (MVN) instead of / sqrt(var + eps)
    channel_inner: Dim = 1  # the affine parameters of element f are at (f / inner) % count
    channel_count: Dim = 1


def plan_moments(ctx: PlanCtx, mo: Moments, scale: int | None = None, bias: int | None = None) -> list[Step]:
    rows = numel(tuple(d for a, d in enumerate(mo.shape) if a not in mo.reduced))
    if isinstance(rows, int) and rows == 0:
        return []
    kept, red = split_axes(mo.shape, mo.reduced)
    k = numel(d for d, _ in red)
    red_inner = bool(red) and (not kept or red[-1][1] == 1)
    lanes = lanes_for(rows, k, red_inner)
    base_params, base_fn = walk_code("base_of", kept, "O")
    off_params, off_fn = walk_code("offset_of", red, "R")
    defs: dict[str, object] = {"LANES": lanes, "RED_INNER": int(red_inner), "BASE": base_fn, "OFFSET": off_fn,
                               "OUT": mo.out, "EPS_OUTSIDE": mo.eps_outside}
    params: dict[str, object] = {"M": rows, "K": k, "EPS": float(mo.eps), **base_params, **off_params}
    reads = {"x": ctx.input(0)}
    if scale is not None:
        defs["SCALE"] = True
        reads["scale"] = ctx.input(scale)
    if bias is not None:
        defs["BIAS"] = True
        reads["bias"] = ctx.input(bias)
    stats = ({d: v for d, v in defs.items() if d not in ("SCALE", "BIAS")}, dict(params), {"x": ctx.input(0)})
    if scale is not None or bias is not None:
        params.update(CH_INNER=mo.channel_inner, CH_COUNT=mo.channel_count)

    def variant(lanes: int, group: int) -> list[Step]:
        return in_parts(ctx, "normalization/moments.wgsl", f"moments_{mo.out}", rows, k, lanes,
                        {**defs, **lane_defs(lanes, group)}, params, reads, {"y": ctx.output(0)},
                        ({**stats[0], **lane_defs(lanes, group)}, stats[1], stats[2]), group=group)

    if not red_inner and bound_of(k) <= CPU_ROW_WALK:
        # Rows side by side in memory (a LayerNorm over NCHW channels): on a CPU-type adapter a
        # thread walks its row alone, its neighbours the next rows (no barrier at all; lavapipe,
        # ConvNeXt-atto's 17 channel norms at 224x224: 11.1 -> 5.6 ms)
        return by_adapter(ctx, f"moments_{mo.out}", variant, (1, CPU_ROW_GROUP), lanes)
    if isinstance(k, int) and k < CPU_ROW_MIN:
        return variant(lanes, WORKGROUP_SIZE)
    # As rownorm's rows (rowstats.plan_rows): on a CPU-type adapter a row takes one SIMD batch of
    # CPU_LANES threads, whose barriers switch nothing (lavapipe, a VAE decoder's GroupNorms,
    # 18 of them at 32x32 latents: ~95 -> ~65 ms).
    return by_adapter(ctx, f"moments_{mo.out}", variant, (CPU_LANES, CPU_LANES), lanes)


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float, eps_outside: bool = False) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    var = np.square(x - mean).mean(axis=axes, keepdims=True)
    return (x - mean) / (np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps))


class InstanceNormalization(Operator):
    """y = (x - mean) / sqrt(var + eps) * scale[c] + B[c], statistics per image and channel."""

    op_type = "InstanceNormalization"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x = ctx.input_shape(0)
        if len(x) < 3:
            raise ctx.fail(f"expects [N, C, *spatial], got rank {len(x)}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        for i, what in ((1, "scale"), (2, "B")):
            _channel_index(ctx, what, i, x[1])
        return [(ctx.input_dtype(0), x)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0].astype(np.float64)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = _normalize(x, tuple(range(2, x.ndim)), float(ctx.attr("epsilon", 1e-5)))
        return [ctx.cast_output(y * vals[1].reshape(shape) + vals[2].reshape(shape))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        x = ctx.input_shape(0)
        mo = Moments(x, set(range(2, len(x))), "meanvar", float(ctx.attr("epsilon", 1e-5)),
                     channel_inner=numel(x[2:]), channel_count=x[1])
        return plan_moments(ctx, mo, scale=1, bias=2)


class GroupNormalization(Operator):
    """Statistics per image and group of C / num_groups channels. scale and bias are per
    channel from opset 21, per group in opset 18 (as that opset's spec says)."""

    op_type = "GroupNormalization"

    def groups(self, ctx: InferenceCtx) -> tuple[int, int, bool]:
        """(groups, channels, per-channel parameters)."""
        x = ctx.input_shape(0)
        if len(x) < 3:
            raise ctx.fail(f"expects [N, C, *spatial], got rank {len(x)}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        g = int(ctx.attr("num_groups"))
        c = ctx.literal(x[1], "the channel axis", 0)
        if g < 1 or c % g:
            raise ctx.fail(f"attribute 'num_groups' {g} must divide the {c} channels")
        return g, c, ctx.opset >= 21

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        g, c, per_channel = self.groups(ctx)
        for i, what in ((1, "scale"), (2, "bias")):
            _channel_index(ctx, what, i, c if per_channel else g)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        g, c, per_channel = self.groups(ctx)
        x = vals[0].astype(np.float64)
        grouped = x.reshape(x.shape[0], g, -1)
        y = _normalize(grouped, (2,), float(ctx.attr("epsilon", 1e-5))).reshape(x.shape)
        scale, bias = vals[1], vals[2]
        if not per_channel:
            scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return [ctx.cast_output(y * scale.reshape(shape) + bias.reshape(shape))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        g, c, per_channel = self.groups(ctx)
        x = ctx.input_shape(0)
        spatial = numel(x[2:])
        inner, count = (spatial, c) if per_channel else (spatial * (c // g), g)
        mo = Moments((x[0], g, (c // g) * spatial), {2}, "meanvar", float(ctx.attr("epsilon", 1e-5)),
                     channel_inner=inner, channel_count=count)
        return plan_moments(ctx, mo, scale=1, bias=2)


class MeanVarianceNormalization(Operator):
    """y = (x - mean) / (sqrt(var) + 1e-9) over `axes` (default [0, 2, 3]), as the spec's function."""

    op_type = "MeanVarianceNormalization"

    def axes(self, ctx: InferenceCtx) -> set[int]:
        rank = ctx.input_rank(0)
        axes = {ctx.axis(int(a), rank, "axes entry") for a in ctx.attr("axes", [0, 2, 3])}
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        return axes

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self.axes(ctx)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        axes = tuple(sorted(self.axes(ctx)))
        return [ctx.cast_output(_normalize(vals[0].astype(np.float64), axes, 1e-9, eps_outside=True))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        return plan_moments(ctx, Moments(ctx.input_shape(0), self.axes(ctx), "meanvar", 1e-9, eps_outside=True))


class LpNormalization(Operator):
    """y = x / ||x||_p along `axis` (p is 1 or 2); a zero norm gives 0, as onnxruntime does."""

    op_type = "LpNormalization"

    def params(self, ctx: InferenceCtx) -> tuple[int, int]:
        rank = ctx.input_rank(0)
        p = int(ctx.attr("p", 2))
        if p not in (1, 2):
            raise ctx.fail(f"attribute 'p' {p} is not supported (1 or 2)")
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        return ctx.axis(int(ctx.attr("axis", -1)), rank), p

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self.params(ctx)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        axis, p = self.params(ctx)
        x = vals[0].astype(np.float64)
        norm = np.sum(np.abs(x) ** p, axis=axis, keepdims=True) ** (1.0 / p)
        with np.errstate(all="ignore"):
            return [ctx.cast_output(np.where(norm == 0, 0.0, x / norm))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        axis, p = self.params(ctx)
        return plan_moments(ctx, Moments(ctx.input_shape(0), {axis}, f"lp{p}"))


def channel_operators() -> list[tuple[Operator, int]]:
    """The per-channel normalizations CNNs use (registered by `operators`)."""
    return [(BatchNormalization(), 1), (InstanceNormalization(), 1), (GroupNormalization(), 18),
            (MeanVarianceNormalization(), 1), (LpNormalization(), 1)]
