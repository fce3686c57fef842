"""Tensors made from a shape rather than from values: EyeLike, the random generators and
MelWeightMatrix (a constant: computed on the host).

All of them plan one dispatch of the shared map kernel (elementwise/map_kernel.py) with no operand to read
(Bernoulli reads its probabilities): the expression computes each element from its flat index
`i`.

Random numbers are counter-based: element i of a node draws a PCG hash of (i, the node's seed),
so a dispatch is deterministic, parallel and needs no state. The numbers are not those of
onnxruntime or numpy (each runtime has its own generator; the ONNX spec does not fix one): the
tests check their distribution. A `seed` attribute fixes the stream; without one the seed is
derived from the node's name, so a plan draws the same numbers on every run (ONNX leaves an
unseeded generator's stream to the runtime). Random nodes never fold: their values would be
baked into the plan.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.elementwise.map_kernel import map_dispatch, operand
from onyxia.plan import Step

# ---- EyeLike ------------------------------------------------------------------------------


def _dtype_attr(ctx: InferenceCtx, default: DType) -> DType:
    """The `dtype` attribute as a DType (default when absent), with an error naming it."""
    value = ctx.attr("dtype", None)
    if value is None:
        return default
    try:
        return dtypes.from_onnx(int(value))
    except Exception as exc:
        raise ctx.fail(f"attribute 'dtype' = {value}: {exc}") from None


class EyeLike(Operator):
    """A 2-D tensor of the input's shape with ones on diagonal `k`: folds when the shape is static."""

    op_type = "EyeLike"
    folds_from_shapes = True

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        if len(shape) != 2:
            raise ctx.fail(f"input must be 2-D, got rank {len(shape)}", 0)
        return [(_dtype_attr(ctx, ctx.input_dtype(0)), shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        rows, cols = ctx.input_shape(0)
        if not isinstance(rows, int) or not isinstance(cols, int):
            return None
        return [np.eye(rows, cols, int(ctx.attr("k", 0)), dtype=ctx.output_dtype(0).numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        cols = ctx.output_shape(0)[1]
        expr = "select(0.0, 1.0, i32(i % COLS()) - i32(i / COLS()) == K())"
        return map_dispatch(ctx, expr, [], params={"COLS": cols, "K": (int(ctx.attr("k", 0)), "i32")},
                            label="eye_like")


# ---- random generators --------------------------------------------------------------------

def pcg_hash(value: int) -> int:
    """PCG's output hash of a 32-bit word (Jarzynski and Olano, 2020): the kernels' generator."""
    state = (value * 747796405 + 2891336453) & 0xFFFFFFFF
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & 0xFFFFFFFF
    return (word >> 22) ^ word


def _wgsl_hash(name: str, value: str) -> str:
    return (f"var {name} = ({value}) * 747796405u + 2891336453u;\n"
            f"    {name} = (({name} >> (({name} >> 28u) + 4u)) ^ {name}) * 277803737u;\n"
            f"    {name} = ({name} >> 22u) ^ {name};")


# Uniform in [0, 1) from the top 24 bits of one hash; normal by Box-Muller from two hashes.
_UNIFORM = _wgsl_hash("h0", "i ^ SEED()") + "\n    let u0 = f32(h0 >> 8u) * (1.0 / 16777216.0);"
_NORMAL = (_wgsl_hash("h0", "(2u * i) ^ SEED()") + "\n    " + _wgsl_hash("h1", "(2u * i + 1u) ^ SEED()")
           + "\n    let u0 = (f32(h0 >> 8u) + 1.0) * (1.0 / 16777216.0);"  # (0, 1]: the log stays finite
           + "\n    let u1 = f32(h1 >> 8u) * (1.0 / 16777216.0);"
           + "\n    let z = sqrt(-2.0 * log(u0)) * cos(6.283185307179586 * u1);")


@dataclass(frozen=True)
class RandomRow:
    normal: bool  # RandomNormal* (mean, scale) rather than uniform (low, high)
    like: bool  # the shape (and default dtype) come from input 0 rather than attributes
    bernoulli: bool = False  # 1 with the probability input 0 holds, else 0


RANDOM_OPS = {
    "RandomUniform": RandomRow(normal=False, like=False),
    "RandomNormal": RandomRow(normal=True, like=False),
    "RandomUniformLike": RandomRow(normal=False, like=True),
    "RandomNormalLike": RandomRow(normal=True, like=True),
    "Bernoulli": RandomRow(normal=False, like=True, bernoulli=True),
}


class RandomOp(Operator):
    """RandomUniform/RandomNormal(+Like) and Bernoulli: one counter-based map kernel each."""

    def __init__(self, op_type: str, row: RandomRow):
        self.op_type, self.row = op_type, row

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if self.row.like:
            if self.row.bernoulli and not ctx.input_dtype(0).is_float:
                raise ctx.fail(f"probabilities must be floating point, got {ctx.input_dtype(0)}", 0)
            dtype, shape = _dtype_attr(ctx, ctx.input_dtype(0)), ctx.input_shape(0)
        else:
            dtype = _dtype_attr(ctx, dtypes.FLOAT32)
            shape = tuple(int(d) for d in ctx.attr("shape"))
            if any(d < 0 for d in shape):
                raise ctx.fail(f"attribute 'shape' {list(shape)} has a negative dim")
        if not self.row.bernoulli and not dtype.is_float:
            raise ctx.fail(f"attribute 'dtype' must be a floating-point type, got {dtype}")
        return [(dtype, shape)]

    def seed(self, ctx: InferenceCtx) -> int:
        seed = ctx.attr("seed", None)
        if seed is None:  # no seed: one fixed stream per node (see the module docstring)
            return pcg_hash(zlib.crc32(ctx.node.name.encode()))
        return pcg_hash(int(np.float32(seed).view(np.uint32)))

    def plan(self, ctx: PlanCtx) -> list[Step]:
        params: dict[str, object] = {"SEED": (self.seed(ctx), "u32")}
        if self.row.normal:
            body, expr = _NORMAL, "MEAN() + SCALE() * z"
            params.update(MEAN=float(ctx.attr("mean", 0.0)), SCALE=float(ctx.attr("scale", 1.0)))
        elif self.row.bernoulli:
            body, expr = _UNIFORM, "select(0.0, 1.0, u0 < x0)"
        else:
            body, expr = _UNIFORM, "LOW() + (HIGH() - LOW()) * u0"
            params.update(LOW=float(ctx.attr("low", 0.0)), HIGH=float(ctx.attr("high", 1.0)))
        if self.row.bernoulli:  # the expression converts 0/1 to the output type (bool, int, float)
            return map_dispatch(ctx, expr, [operand(ctx, 0, "f32")], params=params, body=body, label="bernoulli")
        return map_dispatch(ctx, expr, [], params=params, body=body, label="random_normal" if self.row.normal
                            else "random_uniform")


# ---- MelWeightMatrix ----------------------------------------------------------------------

def mel_weight_matrix(mel_bins: int, dft_length: int, sample_rate: int, lower: float, upper: float) -> np.ndarray:
    """[dft_length // 2 + 1, mel_bins] triangular filters (peak 1) between edges equally spaced on
    the mel scale 2595 * log10(1 + f / 700), each edge rounded down to a DFT bin, as onnx and
    onnxruntime compute them."""
    mel_low = 2595 * np.log1p(lower / 700) / np.log(10)
    mel_high = 2595 * np.log1p(upper / 700) / np.log(10)
    mels = np.arange(mel_bins + 2) * ((mel_high - mel_low) / (mel_bins + 2)) + mel_low
    edges = (((dft_length + 1) * (700 * np.expm1(mels / 2595 * np.log(10)))) // sample_rate).astype(np.int64)
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(dft_length // 2 + 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(center > left, (j - left) / (center - left), 1.0)
        fall = (right - j) / (right - center)
    out = np.where((j >= left) & (j <= center), rise, 0.0)
    return np.where((j >= center) & (j < right), fall, out)


class MelWeightMatrix(Operator):
    """MelWeightMatrix (opset 17): all five inputs must be known at compile time (InferenceSession
    specializes on fed values), so the matrix is always a folded constant."""

    op_type = "MelWeightMatrix"

    def args(self, ctx: InferenceCtx) -> tuple[int, int, int, float, float]:
        names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
        values = [np.asarray(ctx.require_value(i, name)).reshape(-1) for i, name in enumerate(names)]
        for i, (name, v) in enumerate(zip(names, values)):
            if v.size != 1:
                raise ctx.fail(f"{name} must be a scalar, got {v.size} values", i)
        mel, dft, rate = (int(v[0]) for v in values[:3])
        if mel < 1 or dft < 1 or rate < 1:
            raise ctx.fail(f"num_mel_bins {mel}, dft_length {dft} and sample_rate {rate} must be positive")
        return mel, dft, rate, float(values[3][0]), float(values[4][0])

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        mel, dft, *_ = self.args(ctx)
        return [(_output_datatype(ctx), (dft // 2 + 1, mel))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return [ctx.cast_output(mel_weight_matrix(*self.args(ctx)))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("MelWeightMatrix always folds")


def _output_datatype(ctx: InferenceCtx) -> DType:
    value = ctx.attr("output_datatype", 1)
    try:
        return dtypes.from_onnx(int(value))
    except Exception as exc:
        raise ctx.fail(f"attribute 'output_datatype' = {value}: {exc}") from None


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(EyeLike(), 9), (MelWeightMatrix(), 17),
            *[(RandomOp(name, row), 15 if row.bernoulli else 1) for name, row in RANDOM_OPS.items()]]


__all__ = ["EyeLike", "MelWeightMatrix", "RANDOM_OPS", "RandomOp", "mel_weight_matrix", "operators", "pcg_hash"]
