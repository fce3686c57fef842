"""Sliding-window geometry shared by Conv, ConvTranspose and the poolings.

auto_pad, pads, strides, dilations and ceil_mode resolve to a `Window`; `window_params` gives the
params shaders/conv/window.wgsl reads, every spatial rank as 3-D with leading unit axes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.ir.shapes import Dim, Shape
from onyxia.operators.base import InferenceCtx

MAX_SPATIAL = 3


@dataclass(frozen=True)
class Window:
    """A sliding window over the spatial axes: pads before (`begin`) and after (`end`) may be
    symbolic (auto_pad SAME over symbolic dims); everything else is static."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[Dim, ...]
    end: tuple[Dim, ...]
    out: tuple[Dim, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """Input span of the dilated kernel per axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def int_list(ctx: InferenceCtx, name: str, n: int, default: int, minimum: int | None = None) -> tuple[int, ...]:
    """An integer-list attribute with one entry per spatial axis (or `n` entries)."""
    value = ctx.attr(name, None)
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return (default,) * n
    values = tuple(int(v) for v in value)
    if len(values) != n:
        raise ctx.fail(f"attribute '{name}' has {len(values)} values, expected {n}")
    if minimum is not None and any(v < minimum for v in values):
        raise ctx.fail(f"attribute '{name}' {list(values)} must be >= {minimum}")
    return values


def auto_pad_of(ctx: InferenceCtx) -> str:
    mode = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if mode not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ctx.fail(f"attribute 'auto_pad' value {mode!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    return mode


def _out_size(size: Dim, padded_extra: Dim, extent: int, stride: int, begin: Dim, ceil_mode: bool) -> Dim:
    """Output length of a window over `size` + pads. In ceil mode the last window must start
    inside the input or the leading pad (PyTorch's rule, which ONNX and onnxruntime follow);
    that test is written in // and % only, so it also holds for a symbolic size."""
    span = size + padded_extra - extent
    if not ceil_mode:
        return span // stride + 1
    out = (span + stride - 1) // stride + 1
    # (out - 1) * stride >= size + begin  <=>  (-span) % stride >= extent - end
    threshold = extent - (padded_extra - begin)
    if isinstance(threshold, int) and threshold <= 0:
        return out - 1
    if isinstance(threshold, int) and threshold > stride - 1:
        return out
    return out - ((-span) % stride + stride - threshold) // stride


def window_of(ctx: InferenceCtx, spatial: Shape, kernel: tuple[int, ...], *, ceil_mode: bool = False) -> Window:
    """The window of a Conv or pooling node over `spatial` (auto_pad, pads, strides, dilations)."""
    n = len(spatial)
    strides = int_list(ctx, "strides", n, 1, minimum=1)
    dilations = int_list(ctx, "dilations", n, 1, minimum=1)
    extent = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
    mode = auto_pad_of(ctx)
    begin: list[Dim] = []
    end: list[Dim] = []
    out: list[Dim] = []
    if mode == "NOTSET":
        pads = int_list(ctx, "pads", 2 * n, 0)
        begin, end = list(pads[:n]), list(pads[n:])
        out = [_out_size(s, b + e, x, st, b, ceil_mode) for s, b, e, x, st in zip(spatial, begin, end, extent, strides)]
    elif mode == "VALID":
        begin, end = [0] * n, [0] * n
        out = [_out_size(s, 0, x, st, 0, ceil_mode) for s, x, st in zip(spatial, extent, strides)]
    else:
        for axis, (s, x, st) in enumerate(zip(spatial, extent, strides)):
            o = (s + st - 1) // st
            total = (o - 1) * st + x - s
            if isinstance(total, int):
                total = max(total, 0)
            elif x < st:  # total may be negative (max(0, total) is not a polynomial): needs the value
                raise ctx.fail(f"auto_pad {mode} with stride {st} larger than the kernel extent {x} needs a static "
                               f"size on spatial axis {axis}, got {s}", 0)
            small = total // 2
            b = small if mode == "SAME_UPPER" else total - small
            begin.append(b)
            end.append(total - b)
            out.append(o)
    for axis, o in enumerate(out):
        if isinstance(o, int) and o <= 0:
            raise ctx.fail(f"the window (kernel {list(kernel)}, dilations {list(dilations)}) does not fit spatial "
                           f"axis {axis} of size {spatial[axis]} with pads {begin[axis]}+{end[axis]}", 0)
    return Window(tuple(kernel), strides, dilations, tuple(begin), tuple(end), tuple(out))


def padded_windows(x: np.ndarray, win: Window, fill: float) -> np.ndarray:
    """Host-side view [N, C, *out, *kernel] of every window over a padded `x` (for folding)."""
    n = len(win.kernel)
    spatial = x.shape[2:]
    # The padding actually needed: enough for the last window, never less than zero.
    needed = [(o - 1) * s + e for o, s, e in zip(win.out, win.strides, win.extent)]
    after = [max(nd - sp - b, 0) for nd, sp, b in zip(needed, spatial, win.begin)]
    padded = np.pad(x, [(0, 0), (0, 0)] + [(b, a) for b, a in zip(win.begin, after)], constant_values=fill)
    view = np.lib.stride_tricks.sliding_window_view(padded, win.extent, axis=tuple(range(2, 2 + n)))
    strided = (slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(win.out, win.strides))
    dilated = tuple(slice(None, None, d) for d in win.dilations)
    return view[strided + dilated]


def spatial_3d(values: tuple, fill: object) -> tuple:
    """Spatial values as 3-D (leading unit axes)."""
    return (fill,) * (MAX_SPATIAL - len(values)) + tuple(values)


def window_params(spatial: tuple[Dim, ...], win: Window) -> dict[str, object]:
    """The params conv/window.wgsl reads: input and output sizes, kernel, strides, dilations,
    leading pads (i32), over 3-D."""
    (idp, ih, iw), (od, oh, ow) = spatial_3d(spatial, 1), spatial_3d(win.out, 1)
    kd, kh, kw = spatial_3d(win.kernel, 1)
    sd, sh, sw = spatial_3d(win.strides, 1)
    dd, dh, dw = spatial_3d(win.dilations, 1)
    pd, ph, pw = spatial_3d(win.begin, 0)
    return {"ID": idp, "IH": ih, "IW": iw, "OH": oh, "OW": ow, "ISP": idp * ih * iw, "P": od * oh * ow,
            "KD": kd, "KH": kh, "KW": kw, "KS": kd * kh * kw, "SD": sd, "SH": sh, "SW": sw,
            "DD": dd, "DH": dh, "DW": dw, "PD": (pd, "i32"), "PH": (ph, "i32"), "PW": (pw, "i32")}
