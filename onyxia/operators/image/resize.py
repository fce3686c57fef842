"""Resize (and the deprecated Upsample).

Resize runs shaders/image/resize.wgsl, one thread per output element. The kernel is
specialized per node by generated code: adjacent axes that are not resized merge into one
copied coordinate; every resized axis maps its output coordinate to the input
(coordinate_transformation_mode), then takes 1 (nearest), 2 (linear) or 4 (cubic) taps, and the
taps of all resized axes are combined as a separable product. Antialiased downscaling widens
an axis's filter by 1 / scale (as onnx's reference and onnxruntime): more taps, static per axis.
Scales and sizes must be constants; input dims may be symbolic (a size-derived scale is then
computed in the kernel from the dims, as onnxruntime computes it: out / in in f32).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides
from onyxia.plan import Step

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
SUPPORT = {"linear": 1, "cubic": 2}  # filter radius in input pixels (before antialias widening)


def _is_int(d: object) -> bool:
    return isinstance(d, int)


@dataclass(frozen=True)
class ResizeAxis:
    """One resized axis: output and input sizes, the scale (None: out / in, computed in the
    kernel) and the region of interest (tf_crop_and_resize)."""

    axis: int
    size_in: Dim
    size_out: Dim
    scale: float | None
    roi: tuple[float, float] = (0.0, 1.0)
    aa_start: int | None = None  # antialias: offset of the first tap from floor(x); None: plain taps

    def taps(self, mode: str) -> int:
        return TAPS[mode] if self.aa_start is None else 2 - 2 * self.aa_start


@dataclass(frozen=True)
class ResizeSpec:
    out: Shape
    axes: tuple[ResizeAxis, ...]
    mode: str  # nearest | linear | cubic
    coord: str
    nearest: str  # a NEAREST_MODES entry, or "simple" (opsets < 11: truncate, ceil when downscaling)
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0


def _scaled_size(size: Dim, scale: float) -> Dim:
    """floor(size * scale) as onnxruntime computes it (f32); exact rational for a symbol."""
    if _is_int(size):
        return int(np.float32(scale) * np.float32(size))
    frac = Fraction(float(np.float32(scale)))
    return (size * frac.numerator) // frac.denominator


class Resize(Operator):
    """Resize, opsets 10 to 19 (inputs X, roi, scales, sizes; from 18 `axes`, antialias,
    keep_aspect_ratio_policy)."""

    op_type = "Resize"

    # -- reading the node --
    def inputs(self, ctx: InferenceCtx, need_roi: bool) -> tuple[np.ndarray | None, np.ndarray | None,
                                                                   list[Dim] | None]:
        """(roi, scales, sizes) where given (an empty tensor is absent); they must be constants,
        roi only when tf_crop_and_resize reads it."""
        if ctx.opset < 11:
            return None, np.asarray(ctx.require_value(1, "scales"), np.float32).reshape(-1), None

        def given(i: int) -> bool:
            shape = ctx.input_shape(i) if ctx.has_input(i) else (0,)
            return not (isinstance(numel(shape), int) and numel(shape) == 0)

        roi = np.asarray(ctx.require_value(1, "roi"), np.float64).reshape(-1) if need_roi and given(1) else None
        scales = np.asarray(ctx.require_value(2, "scales"), np.float32).reshape(-1) if given(2) else None
        sizes = ctx.require_dims(3, "sizes") if given(3) else None
        if (scales is None) == (sizes is None):
            raise ctx.fail("exactly one of 'scales' and 'sizes' must be given (non-empty)", 2)
        return roi, scales, sizes

    def modes(self, ctx: InferenceCtx) -> tuple[str, str, str]:
        mode = ctx.attr("mode", "nearest")
        if mode not in TAPS:
            raise ctx.fail(f"attribute 'mode' {mode!r} is not one of nearest, linear, cubic")
        if ctx.opset < 11:
            if mode == "cubic":
                raise ctx.fail(f"attribute 'mode' cubic needs opset 11, the model has {ctx.opset}")
            return mode, "asymmetric", "simple"
        coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
        if coord not in COORD_MODES or (coord == "half_pixel_symmetric" and ctx.opset < 19):
            raise ctx.fail(f"attribute 'coordinate_transformation_mode' {coord!r} is not supported at opset "
                           f"{ctx.opset}")
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        if nearest not in NEAREST_MODES:
            raise ctx.fail(f"attribute 'nearest_mode' {nearest!r} is not one of {', '.join(NEAREST_MODES)}")
        return mode, coord, nearest

    def spec(self, ctx: InferenceCtx) -> ResizeSpec:
        x = ctx.input_shape(0)
        rank = len(x)
        mode, coord, nearest = self.modes(ctx)
        if mode != "nearest" and not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"mode {mode!r} needs float input, got {ctx.input_dtype(0)} (only nearest copies "
                           "integers)", 0)
        roi, scales, sizes = self.inputs(ctx, need_roi=coord == "tf_crop_and_resize")
        axes = [ctx.axis(int(a), rank, "axes entry") for a in ctx.attr("axes", None) or range(rank)]
        if len(set(axes)) != len(axes):
            raise ctx.fail(f"attribute 'axes' {axes} names an axis twice")
        given, what = (list(scales), "scales") if scales is not None else (list(sizes or []), "sizes")
        if len(given) != len(axes):
            raise ctx.fail(f"{what} has {len(given)} entries for {len(axes)} axes", 2 if scales is not None else 3)
        rois = {a: (0.0, 1.0) for a in axes}
        if coord == "tf_crop_and_resize":
            if roi is None or len(roi) != 2 * len(axes):
                raise ctx.fail(f"coordinate_transformation_mode tf_crop_and_resize needs roi with {2 * len(axes)} "
                               "values", 1)
            rois = {a: (float(roi[k]), float(roi[len(axes) + k])) for k, a in enumerate(axes)}

        per_axis: dict[int, tuple[Dim, float | None]] = {}  # axis -> (out size, static scale)
        if scales is not None:
            for a, s in zip(axes, scales):
                if not s > 0:
                    raise ctx.fail(f"scale {s} for axis {a} must be positive", 2)
                per_axis[a] = (_scaled_size(x[a], float(s)), float(s))
        else:
            policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
            if policy == "stretch":
                # out / in in f32 as onnxruntime; left to the kernel when a dim is symbolic
                per_axis = {a: (d, float(np.float32(d) / np.float32(x[a])) if _is_int(d) and _is_int(x[a]) else None)
                            for a, d in zip(axes, sizes)}  # type: ignore[arg-type]
            elif policy in ("not_larger", "not_smaller"):
                if not all(_is_int(x[a]) and _is_int(d) for a, d in zip(axes, sizes)):  # type: ignore[arg-type]
                    raise ctx.fail(f"keep_aspect_ratio_policy {policy} needs static sizes and input dims", 3)
                ratios = [np.float32(d) / np.float32(x[a]) for a, d in zip(axes, sizes)]  # type: ignore[arg-type]
                scale = float(min(ratios) if policy == "not_larger" else max(ratios))
                per_axis = {a: (int(scale * x[a] + 0.5), scale) for a in axes}
            else:
                raise ctx.fail(f"attribute 'keep_aspect_ratio_policy' {policy!r} is not supported")

        out = list(x)
        resized: list[ResizeAxis] = []
        for a, (size, scale) in per_axis.items():
            out[a] = size
            identity = (scale == 1.0 if scale is not None else size == x[a]) and coord != "tf_crop_and_resize"
            if not identity:
                resized.append(ResizeAxis(a, x[a], size, scale, rois[a]))
        if ctx.attr("antialias", 0) and mode != "nearest":
            for n, r in enumerate(resized):
                if r.scale is None:
                    raise ctx.fail(f"attribute 'antialias' needs a static scale on axis {r.axis}: static dims or "
                                   "a 'scales' input")
                if r.scale < 1.0:  # the filter widens to SUPPORT / scale input pixels
                    start = int(np.floor(-SUPPORT[mode] / np.float32(r.scale))) + 1
                    resized[n] = replace(r, aa_start=start)
        return ResizeSpec(tuple(out), tuple(sorted(resized, key=lambda r: r.axis)), mode, coord, nearest,
                          float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("exclude_outside", 0)),
                          float(ctx.attr("extrapolation_value", 0.0)))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.spec(ctx).out)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x = ctx.input_value(0)
        if x is None or x.dtype == object:
            return None
        spec = self.spec(ctx)
        y = x.astype(np.float64)
        for r in spec.axes:
            y = _resize_axis(y, r, spec)
        return [ctx.cast_output(y)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        spec = self.spec(ctx)
        total = numel(spec.out)
        if _is_int(total) and total == 0:
            return []
        if not spec.axes:  # every axis keeps its size and coordinates: the same bytes
            return ctx.alias_output(0, 0)
        ctx.compute_type(ctx.input_dtype(0), "input")
        params, code = _resize_code(ctx.input_shape(0), spec)
        defs = {"MODE": spec.mode, "COORD": spec.coord, "NEAREST": spec.nearest,
                "TAPS": max(r.taps(spec.mode) for r in spec.axes), "EXCLUDE_OUTSIDE": spec.exclude_outside,
                "ANTIALIAS": any(r.aa_start is not None for r in spec.axes),
                "EXTRAPOLATE": spec.coord == "tf_crop_and_resize", "BODY": code}
        params.update(TOTAL=total, A=spec.cubic_a, EXTRAPOLATION=spec.extrapolation)
        return [ctx.dispatch("image/resize.wgsl", label=f"resize_{spec.mode}", defs=defs, params=params,
                             reads={"x": ctx.input(0)}, writes={"y": ctx.output(0)}, workgroups=ctx.grid(total))]


def _resize_code(x: Shape, spec: ResizeSpec) -> tuple[dict[str, object], str]:
    """WGSL computing y[i]: decode i into merged copied coordinates and resized ones, gather
    each resized axis's taps, then sum the separable product (or copy the nearest)."""
    resized = {r.axis: r for r in spec.axes}
    strides = contiguous_strides(x)
    # Axes innermost first; a run of copied axes merges into one coordinate (same dims in and
    # out, contiguous in both).
    groups: list[tuple[Dim, Dim, ResizeAxis | None]] = []  # (out dim, input stride, resized axis)
    for a in reversed(range(len(x))):
        r = resized.get(a)
        if r is None and groups and groups[-1][2] is None:
            d, stride, _ = groups[-1]
            groups[-1] = (d * x[a], stride, None)
            continue
        groups.append((spec.out[a] if r else x[a], strides[a], r))
    params: dict[str, object] = {}
    lines = ["var rem = i;", "var src = 0u;", "var outside = false;"]
    taps: list[tuple[int, str, int]] = []  # (group, stride code, tap count)
    for k, (d, s, r) in enumerate(groups):
        last = k == len(groups) - 1
        params[f"D{k}"] = d
        coord = "rem" if last else f"rem % D{k}()"
        lines.append(f"let c{k} = {coord};" + ("" if last else f" rem = rem / D{k}();"))
        if not (_is_int(s) and s == 1):
            params[f"S{k}"] = s
        stride = "" if _is_int(s) and s == 1 else f" * S{k}()"
        if r is None:
            lines.append(f"src += c{k}{stride};")
            continue
        params[f"IN{k}"] = r.size_in
        if r.scale is not None:
            params[f"SC{k}"] = float(np.float32(r.scale))
            scale = f"SC{k}()"
        else:
            scale = f"f32(D{k}()) / f32(IN{k}())"
        if spec.coord == "tf_crop_and_resize":
            params[f"R0_{k}"], params[f"R1_{k}"] = float(r.roi[0]), float(r.roi[1])
            roi = f"R0_{k}(), R1_{k}()"
        else:
            roi = "0.0, 1.0"
        if r.aa_start is None:
            lines.append(f"let t{k} = axis_taps(f32(c{k}), {scale}, IN{k}(), D{k}(), {roi});")
        else:
            lines.append(f"let t{k} = axis_taps_aa(f32(c{k}), {scale}, IN{k}(), D{k}(), {roi}, {r.aa_start}i, "
                         f"{r.taps(spec.mode)}u);")
        lines.append(f"outside = outside || t{k}.outside;")
        taps.append((k, stride, r.taps(spec.mode)))
    lines.append("var acc = ACC_ZERO;")
    for k, _, n in taps:
        lines.append(f"for (var q{k} = 0u; q{k} < {n}u; q{k}++) {{")
    index = "src + " + " + ".join(f"t{k}.idx[q{k}]{stride}" for k, stride, _ in taps)
    weight = " * ".join(f"t{k}.w[q{k}]" for k, _, _ in taps)
    lines.append(f"acc = accumulate(acc, {weight}, x_load({index}));")
    lines.append("}" * len(taps))
    return params, "\n    ".join(lines)


# ---- host-side Resize (folding) -------------------------------------------------------------

def _original(o: np.ndarray, r: ResizeAxis, spec: ResizeSpec) -> np.ndarray:
    n_in, n_out = float(r.size_in), float(r.size_out)
    scale = r.scale if r.scale is not None else np.float32(r.size_out) / np.float32(r.size_in)
    coord = spec.coord
    if coord == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if coord == "half_pixel_symmetric":
        adj = n_out / (scale * n_in)
        return n_in / 2 * (1 - adj) + (o + 0.5) / scale - 0.5
    if coord == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(o)
    if coord == "align_corners":
        return o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(o)
    if coord == "asymmetric":
        return o / scale
    if coord == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    start, end = r.roi
    if n_out > 1:
        return start * (n_in - 1) + o * (end - start) * (n_in - 1) / (n_out - 1)
    return np.full_like(o, 0.5 * (start + end) * (n_in - 1))


def _taps(xo: np.ndarray, r: ResizeAxis, spec: ResizeSpec) -> tuple[np.ndarray, np.ndarray]:
    """(indices [out, taps], weights [out, taps]) of one axis."""
    n_in = r.size_in
    if spec.mode == "nearest":
        if spec.nearest == "simple":
            down = r.scale is not None and r.scale < 1
            idx = np.ceil(xo) if down else np.trunc(xo)
        else:
            idx = {"round_prefer_floor": np.ceil(xo - 0.5), "round_prefer_ceil": np.floor(xo + 0.5),
                   "floor": np.floor(xo), "ceil": np.ceil(xo)}[spec.nearest]
        return np.clip(idx, 0, n_in - 1).astype(np.int64)[:, None], np.ones((len(xo), 1))
    if spec.mode == "linear" and r.aa_start is not None:
        i0 = np.floor(xo)
        offsets = np.arange(r.aa_start, r.aa_start + r.taps(spec.mode))
        w = np.clip(1 - np.abs(offsets[None, :] - (xo - i0)[:, None]) * float(np.float32(r.scale)), 0, 1)
        w = w / w.sum(axis=1, keepdims=True)
        idx = i0[:, None] + offsets[None, :]
        if spec.exclude_outside:
            w = np.where((idx < 0) | (idx > n_in - 1), 0.0, w)
            w = w / w.sum(axis=1, keepdims=True)
        return np.clip(idx, 0, n_in - 1).astype(np.int64), w
    if spec.mode == "linear":
        xc = np.clip(xo, 0, n_in - 1)
        i0 = np.floor(xc)
        f = xc - i0
        idx = np.stack([i0, np.minimum(i0 + 1, n_in - 1)], axis=1)
        return idx.astype(np.int64), np.stack([1 - f, f], axis=1)
    a = spec.cubic_a
    i0 = np.floor(xo)
    s = xo - i0
    start = -1 if r.aa_start is None else r.aa_start
    offsets = np.arange(start, start + r.taps(spec.mode))
    shrink = 1.0 if r.aa_start is None else min(float(np.float32(r.scale)), 1.0)
    dist = np.abs(offsets[None, :] - s[:, None]) * shrink
    near = ((a + 2) * dist - (a + 3)) * dist * dist + 1
    far = ((a * dist - 5 * a) * dist + 8 * a) * dist - 4 * a
    w = np.where(dist <= 1, near, np.where(dist < 2, far, 0.0))
    w = w / w.sum(axis=1, keepdims=True)
    idx = i0[:, None] + offsets[None, :]
    if spec.exclude_outside:
        w = np.where((idx < 0) | (idx > n_in - 1), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, n_in - 1).astype(np.int64), w


def _resize_axis(y: np.ndarray, r: ResizeAxis, spec: ResizeSpec) -> np.ndarray:
    xo = _original(np.arange(int(r.size_out), dtype=np.float64), r, spec)
    idx, w = _taps(xo, r, spec)
    moved = np.moveaxis(y, r.axis, -1)
    out = (moved[..., idx] * w).sum(axis=-1)
    if spec.coord == "tf_crop_and_resize":
        out = np.where((xo < 0) | (xo > r.size_in - 1), spec.extrapolation, out)
    return np.moveaxis(out, -1, r.axis)


class Upsample(Resize):
    """Upsample (deprecated; opset 7: scales attribute, 9: scales input): nearest or linear
    with asymmetric coordinates, as Resize-10."""

    op_type = "Upsample"

    def inputs(self, ctx: InferenceCtx, need_roi: bool) -> tuple[np.ndarray | None, np.ndarray | None,
                                                                   list[Dim] | None]:
        if ctx.opset < 9:
            return None, np.asarray(ctx.attr("scales"), np.float32), None
        return None, np.asarray(ctx.require_value(1, "scales"), np.float32).reshape(-1), None

    def modes(self, ctx: InferenceCtx) -> tuple[str, str, str]:
        mode = ctx.attr("mode", "nearest")
        mode = "linear" if mode == "bilinear" else mode  # opset 7's spelling
        if mode not in ("nearest", "linear"):
            raise ctx.fail(f"attribute 'mode' {mode!r} is not one of nearest, linear")
        return mode, "asymmetric", "simple"


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Resize(), 10), (Upsample(), 7)]
