"""DFT and STFT: batched radix-2 FFTs (shaders/spectral/fft.wgsl).

Both reduce to one record, `Transform`: B transforms of length L, each reading its input at a
strided place of x (DFT: along an axis; STFT: one frame of the signal, windowed) and writing its
bins at a strided place of y. A power-of-two L is one FFT; any other L is Bluestein's chirp-z
transform, a circular convolution of power-of-two size M >= 2L - 1 done with three FFTs. Every
invocation does one element or one butterfly, so the work per invocation is bounded whatever
the length (lavapipe stops an invocation's loops after ~65,535 iterations).

L may be symbolic (a DFT along a dynamic axis): the plan then holds the stages of the largest
FFT it supports (M up to 2^MAX_LOG), each butterfly level in a Select whose guard says whether
L needs it, so update_dimensions changes counts and choices, never shaders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.plan import ALWAYS, Guard, Step, at_least

SHADER = "spectral/fft.wgsl"
MAX_LOG = 26  # the largest FFT of a symbolic length: 2^26 points (512 MiB of complex f32)
# Lengths up to this that are not powers of two are summed directly: L terms per invocation
# (bounded), one dispatch, and exact where the definition is (a real signal's DC and Nyquist
# bins have imaginary parts of exactly 0, as onnx's conformance cases check with atol 1e-7).
DIRECT_MAX = 128
_STAGE_FLAGS = {"load": ("READS_X", "WORK", "WORK_RW"), "chirp": ("WORK", "WORK_RW"),
                "butterfly": ("WORK", "WORK_RW"), "multiply": ("WORK", "WORK_RW"), "store": ("WORK", "WRITES_Y"),
                "direct": ("READS_X", "WRITES_Y")}


@dataclass(frozen=True)
class Transform:
    """B = B1 * B2 transforms of length L: transform b = (b1, b2) reads element j of x at
    b1 * S1 + b2 * S2 + j * SN (NIN elements, zero past them) and writes bin k of y at
    b1 * O1 + b2 * O2 + k * OK, for k < K."""

    length: Dim  # L
    b1: Dim
    b2: Dim
    in_strides: tuple[Dim, Dim, Dim]  # S1, S2, SN
    nin: Dim
    channels: int  # 1: real input, 2: complex
    bins: Dim  # K
    out_strides: tuple[Dim, Dim, Dim]  # O1, O2, OK
    inverse: bool = False
    hermitian: bool = False  # input is a one-sided spectrum (the inverse of a real transform)
    real_out: bool = False
    window: str | None = None  # STFT's window tensor


def _power_of_two(n: Dim) -> bool:
    return isinstance(n, int) and n >= 1 and n & (n - 1) == 0


def plan_transform(ctx: PlanCtx, t: Transform) -> list[Step]:
    """The dispatches computing `t` from input 0 into output 0."""
    batch = t.b1 * t.b2
    if any(isinstance(d, int) and d == 0 for d in (batch, t.bins)):
        return []
    ctx.compute_type(ctx.input_dtype(0), "input")
    sign = 1.0 if t.inverse else -1.0
    s1, s2, sn = t.in_strides
    o1, o2, ok = t.out_strides
    reads = [("x", ctx.input(0))] + ([("window", t.window)] if t.window else [])
    io_params = {"L": t.length, "B": batch, "B2": t.b2, "S1": s1, "S2": s2, "SN": sn, "NIN": t.nin, "K": t.bins,
                 "O1": o1, "O2": o2, "OK": ok}
    io_defs = {"CHANNELS": t.channels, "WINDOW": t.window is not None, "HERMITIAN": t.hermitian,
               "REAL_OUT": t.real_out, "INVERSE": t.inverse}
    if isinstance(t.length, int) and t.length <= DIRECT_MAX and not _power_of_two(t.length):
        return [ctx.dispatch(SHADER, label="fft_direct", reads=dict(reads), writes={"y": ctx.output(0)},
                             params=io_params, workgroups=ctx.grid(batch * t.bins),
                             defs={**io_defs, "STAGE": "direct", "SIGN": int(sign),
                                   **dict.fromkeys(_STAGE_FLAGS["direct"], True)})]
    bluestein = not _power_of_two(t.length)
    if isinstance(t.length, int):
        log = (2 * t.length - 2).bit_length() if bluestein else t.length.bit_length() - 1
        size: Dim = 1 << log
        levels = [(s, ALWAYS) for s in range(log)]
    else:  # Bluestein with M < 4L; a stage s runs where 2^s < M, i.e. 2L - 2 >= 2^s
        size = 4 * t.length
        levels = [(s, at_least(2 * t.length - 2, 1 << s)) for s in range(MAX_LOG)]
    common = {"L": t.length, "B": batch}
    base_defs = {"BLUESTEIN": bluestein}
    work = ctx.scratch(2 * batch * size, hint="fft")
    steps: list[Step] = []

    def stage(name: str, reads: list[tuple[str, str]], writes: list[tuple[str, str]], count: Dim,
              params: dict, defs: dict | None = None, active: Guard = ALWAYS) -> None:
        dispatch = ctx.dispatch(SHADER, label=f"fft_{name}", reads=dict(reads), writes=dict(writes),
                                params={**common, **params},
                                defs={**base_defs, "STAGE": name, **(defs or {}),
                                      **dict.fromkeys(_STAGE_FLAGS[name], True)},
                                workgroups=ctx.grid(count))
        # A butterfly level runs only where the transform is that long (a symbolic length).
        steps.extend(ctx.select(f"fft_{name}/level", [("run", [dispatch], active, ALWAYS),
                                                      ("skip", [], ALWAYS, ALWAYS)]))

    def fft(buffer: str, transforms: Dim, direction: int) -> None:
        for level, active in levels:
            stage("butterfly", [], [("work", buffer)], transforms * size // 2, {"B": transforms},
                  {"LEVEL": level, "SIGN": direction}, active)

    if bluestein:  # the filter's spectrum: one transform, shared by the batch
        filt = ctx.scratch(2 * size, hint="fft_spectrum")
        stage("chirp", [], [("work", filt)], size, {"CHIRP_SIGN": sign})
        fft(filt, 1, -1)
    stage("load", reads, [("work", work)], batch * size,
          {"B2": t.b2, "S1": s1, "S2": s2, "SN": sn, "NIN": t.nin, "CHIRP_SIGN": sign},
          {"CHANNELS": t.channels, "WINDOW": t.window is not None, "HERMITIAN": t.hermitian})
    if bluestein:
        fft(work, batch, -1)
        stage("multiply", [("spectrum", filt)], [("work", work)], batch * size, {})
        fft(work, batch, 1)
    else:
        fft(work, batch, int(sign))
    stage("store", [("work", work)], [("y", ctx.output(0))], batch * t.bins,
          {"B2": t.b2, "K": t.bins, "O1": o1, "O2": o2, "OK": ok, "CHIRP_SIGN": sign},
          {"REAL_OUT": t.real_out, "INVERSE": t.inverse})
    return steps


def host_dft(x: np.ndarray, length: int, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The DFT of x [..., 1 | 2] along `axis` as ONNX defines it, in float64 (folding)."""
    signal = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., None]
    y = np.fft.ifft(signal, n=length, axis=axis) if inverse else np.fft.fft(signal, n=length, axis=axis)
    if onesided:
        y = np.take(y, np.arange(length // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], axis=-1)


# ---- DFT ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DftSpec:
    axis: int
    length: Dim  # L
    inverse: bool
    onesided: bool
    out: Shape


class DFT(Operator):
    """DFT (opset 17: `axis` attribute; 20: `axis` input, default -2): x [..., N, ..., 1 | 2]
    (real or complex) -> the spectrum along `axis` [..., K, ..., 2], K = L or L / 2 + 1
    (onesided), L = dft_length (zero padding or truncation) or N. inverse divides by L;
    inverse and onesided together take a one-sided spectrum back to a real signal [..., L, ..., 1]
    (L defaults to 2 (N - 1))."""

    op_type = "DFT"

    def spec(self, ctx: InferenceCtx) -> DftSpec:
        x = ctx.input_shape(0)
        rank = len(x)
        if rank < 2 or x[-1] not in (1, 2):
            raise ctx.fail(f"expects [..., signal, 1 | 2] (real or complex), got {shape_str(x)}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects a float signal, got {ctx.input_dtype(0)}", 0)
        if ctx.opset < 20:
            raw, what = int(ctx.attr("axis", 1)), "attribute 'axis'"
        else:
            raw = int(np.asarray(ctx.require_value(2, "axis")).reshape(-1)[0]) if ctx.has_input(2) else -2
            what = "input 'axis'"
        if not -rank <= raw < rank - 1 or raw % rank == rank - 1:
            raise ctx.fail(f"{what} {raw} must name a signal axis of the rank-{rank} input (not its last, "
                           "the real/imaginary axis)")
        axis = raw % rank
        inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
        if ctx.has_input(1):
            length: Dim = int(np.asarray(ctx.require_value(1, "dft_length")).reshape(-1)[0])
            if length < 1:
                raise ctx.fail(f"dft_length must be positive, got {length}", 1)
        else:
            length = 2 * (x[axis] - 1) if inverse and onesided else x[axis]
        out = list(x)
        if inverse and onesided:
            out[axis], out[-1] = length, 1
        else:
            out[axis], out[-1] = (length // 2 + 1 if onesided else length), 2
        return DftSpec(axis, length, inverse, onesided, tuple(out))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.spec(ctx).out)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        spec = self.spec(ctx)
        if vals is None or not isinstance(spec.length, int):
            return None
        return [ctx.cast_output(host_dft(vals[0].astype(np.float64), spec.length, spec.axis, spec.inverse,
                                         spec.onesided))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        spec = self.spec(ctx)
        x = ctx.input_shape(0)
        channels, outc = x[-1], spec.out[-1]
        outer, inner = numel(x[:spec.axis]), numel(x[spec.axis + 1:-1])
        n, k = x[spec.axis], spec.out[spec.axis]
        t = Transform(spec.length, outer, inner, (n * inner * channels, channels, inner * channels), n, channels,
                      k, (k * inner * outc, outc, inner * outc), spec.inverse,
                      hermitian=spec.inverse and spec.onesided, real_out=outc == 1)
        return plan_transform(ctx, t)


# ---- STFT ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StftSpec:
    step: int
    length: Dim  # frame_length, the transform length
    frames: Dim
    out: Shape


class STFT(Operator):
    """STFT (opset 17): signal [batch, length, 1 | 2], frame_step, window [frame_length]
    (optional), frame_length (optional) -> [batch, frames, K, 2], frames = 1 + (length -
    frame_length) // frame_step, K = frame_length (or frame_length / 2 + 1, onesided: default).
    Each frame, times the window, is one transform of the batch."""

    op_type = "STFT"

    def spec(self, ctx: InferenceCtx) -> StftSpec:
        x = ctx.input_shape(0)
        if len(x) != 3 or x[-1] not in (1, 2):
            raise ctx.fail(f"expects a signal [batch, length, 1 | 2], got {shape_str(x)}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects a float signal, got {ctx.input_dtype(0)}", 0)
        step = int(np.asarray(ctx.require_value(1, "frame_step")).reshape(-1)[0])
        if step < 1:
            raise ctx.fail(f"frame_step must be positive, got {step}", 1)
        window = ctx.input_shape(2) if ctx.has_input(2) else None
        if window is not None and len(window) != 1:
            raise ctx.fail(f"window must be 1-D [frame_length], got {shape_str(window)}", 2)
        if ctx.has_input(3):
            length: Dim = int(np.asarray(ctx.require_value(3, "frame_length")).reshape(-1)[0])
            if window is not None and not ctx.same_dim(window[0], length):
                raise ctx.fail(f"window has {window[0]} values for frame_length {length}", 2)
        else:
            length = window[0] if window is not None else x[1]
        if isinstance(length, int) and (length < 1 or (isinstance(x[1], int) and length > x[1])):
            raise ctx.fail(f"frame_length {length} must be in [1, {x[1]}] (the signal length)", 3)
        frames = 1 + (x[1] - length) // step
        onesided = bool(ctx.attr("onesided", 1))
        return StftSpec(step, length, frames, (x[0], frames, length // 2 + 1 if onesided else length, 2))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.spec(ctx).out)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        spec = self.spec(ctx)
        if vals is None or not all(isinstance(d, int) for d in spec.out):
            return None
        x = vals[0].astype(np.float64)
        window = vals[2].astype(np.float64) if ctx.has_input(2) else np.ones(int(spec.length))
        starts = np.arange(int(spec.frames)) * spec.step
        frames = x[:, starts[:, None] + np.arange(int(spec.length))[None, :], :] * window[:, None]
        return [ctx.cast_output(host_dft(frames, int(spec.length), 2, False, spec.out[2] != spec.length))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        spec = self.spec(ctx)
        x = ctx.input_shape(0)
        channels, bins = x[-1], spec.out[2]
        t = Transform(spec.length, x[0], spec.frames, (x[1] * channels, spec.step * channels, channels),
                      spec.length, channels, bins, (spec.frames * bins * 2, bins * 2, 2),
                      window=ctx.input(2) if ctx.has_input(2) else None)
        return plan_transform(ctx, t)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(DFT(), 17), (STFT(), 17)]
