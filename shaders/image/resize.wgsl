// Resize, one thread per output element. BODY (generated per node by operators/image/image.py)
// decodes the output index into copied coordinates (accumulated into `src`) and resized ones;
// each resized axis k calls axis_taps() for its input indices and weights (`t<k>`), and the
// loops over the taps of all resized axes sum the separable product (nearest: copy the one tap).
// Buffers: x, y. Defs: MODE (nearest | linear | cubic), TAPS (1 | 2 | 4), COORD
// (coordinate_transformation_mode), NEAREST (nearest_mode, or simple: truncate, ceil when
// downscaling, as opsets < 11), EXCLUDE_OUTSIDE, EXTRAPOLATE (tf_crop_and_resize: an output
// whose input coordinate falls outside the input is EXTRAPOLATION), ANTIALIAS (axis_taps_aa
// for downscaled axes; TAPS is then the most taps of any axis), BODY.
// Params: TOTAL, A (cubic coefficient), EXTRAPOLATION, and per axis those BODY reads.
#import common::grid


const TAPS: u32 = #{TAPS}u;

struct Taps {
    idx: array<u32, #{TAPS}>,
    w: array<f32, #{TAPS}>,
    outside: bool,
}

// Output coordinate o of an axis resized from n_in to n_out -> input coordinate (onnxruntime's
// formulas, in the same order of f32 operations).
fn original(o: f32, scale: f32, n_in: u32, n_out: u32, r0: f32, r1: f32) -> f32 {
#if COORD == half_pixel
    return (o + 0.5) / scale - 0.5;
#else if COORD == half_pixel_symmetric
    let adjustment = f32(n_out) / (scale * f32(n_in));
    let offset = f32(n_in) / 2.0 * (1.0 - adjustment);
    return offset + (o + 0.5) / scale - 0.5;
#else if COORD == pytorch_half_pixel
    return select(0.0, (o + 0.5) / scale - 0.5, n_out > 1u);
#else if COORD == align_corners
    return select(o * f32(n_in - 1u) / f32(n_out - 1u), 0.0, n_out == 1u);
#else if COORD == asymmetric
    return o / scale;
#else if COORD == tf_half_pixel_for_nn
    return (o + 0.5) / scale;
#else
    if (n_out > 1u) {
        return r0 * f32(n_in - 1u) + o * (r1 - r0) * f32(n_in - 1u) / f32(n_out - 1u);
    }
    return 0.5 * (r0 + r1) * f32(n_in - 1u);
#endif
}

#if MODE == cubic
// Keys' cubic convolution weight at distance d (0 <= d <= 2) with coefficient A.
fn cubic(d: f32) -> f32 {
    if (d <= 1.0) {
        return ((A() + 2.0) * d - (A() + 3.0)) * d * d + 1.0;
    }
    return ((A() * d - 5.0 * A()) * d + 8.0 * A()) * d - 4.0 * A();
}
#endif

fn axis_taps(o: f32, scale: f32, n_in: u32, n_out: u32, r0: f32, r1: f32) -> Taps {
    var t: Taps;
    let xo = original(o, scale, n_in, n_out, r0, r1);
    let last = f32(n_in - 1u);
    t.outside = xo < 0.0 || xo > last;
#if MODE == nearest
#if NEAREST == round_prefer_floor
    let r = ceil(xo - 0.5);
#else if NEAREST == round_prefer_ceil
    let r = floor(xo + 0.5);
#else if NEAREST == floor
    let r = floor(xo);
#else if NEAREST == ceil
    let r = ceil(xo);
#else
    let r = select(trunc(xo), ceil(xo), scale < 1.0);
#endif
    t.idx[0] = u32(clamp(r, 0.0, last));
    t.w[0] = 1.0;
#else if MODE == linear
    let xc = clamp(xo, 0.0, last);
    let i0 = floor(xc);
    let f = xc - i0;
    t.idx[0] = u32(i0);
    t.idx[1] = min(u32(i0) + 1u, n_in - 1u);
    t.w[0] = 1.0 - f;
    t.w[1] = f;
#else
    let i0 = floor(xo);
    let s = xo - i0;
    t.w[0] = cubic(s + 1.0);
    t.w[1] = cubic(s);
    t.w[2] = cubic(1.0 - s);
    t.w[3] = cubic(2.0 - s);
    var sum = 0.0;
    for (var j = 0u; j < 4u; j++) {
        let p = i0 + f32(j) - 1.0;
#ifdef EXCLUDE_OUTSIDE
        if (p < 0.0 || p > last) {
            t.w[j] = 0.0;
        }
#endif
        sum += t.w[j];
        t.idx[j] = u32(clamp(p, 0.0, last));  // the edge repeats outside
    }
#ifdef EXCLUDE_OUTSIDE
    for (var j = 0u; j < 4u; j++) {
        t.w[j] = t.w[j] / sum;
    }
#endif
#endif
    return t;
}

#ifdef ANTIALIAS
// The interpolation filter at distance d; antialiased downscaling stretches it by 1 / scale.
fn kernel_weight(d: f32) -> f32 {
    let a = abs(d);
#if MODE == linear
    return max(0.0, 1.0 - a);
#else
    return select(0.0, cubic(a), a < 2.0);
#endif
}

// Taps of an antialiased (downscaled) axis: `count` input pixels from floor(x) + start, with
// weights filter((offset - fraction) * scale), normalized to sum to 1.
fn axis_taps_aa(o: f32, scale: f32, n_in: u32, n_out: u32, r0: f32, r1: f32, start: i32, count: u32) -> Taps {
    var t: Taps;
    let xo = original(o, scale, n_in, n_out, r0, r1);
    let last = f32(n_in - 1u);
    t.outside = xo < 0.0 || xo > last;
    let i0 = floor(xo);
    let ratio = xo - i0;
    var sum = 0.0;
    for (var j = 0u; j < count; j++) {
        t.w[j] = kernel_weight((f32(start + i32(j)) - ratio) * scale);
        sum += t.w[j];
    }
    var kept = 0.0;
    for (var j = 0u; j < count; j++) {
        let p = i0 + f32(start + i32(j));
        t.w[j] = t.w[j] / sum;
#ifdef EXCLUDE_OUTSIDE
        if (p < 0.0 || p > last) {
            t.w[j] = 0.0;
        }
#endif
        kept += t.w[j];
        t.idx[j] = u32(clamp(p, 0.0, last));
    }
#ifdef EXCLUDE_OUTSIDE
    for (var j = 0u; j < count; j++) {
        t.w[j] = t.w[j] / kept;
    }
#endif
    return t;
}
#endif

#if MODE == nearest
const ACC_ZERO: x_t = x_t(0);

fn accumulate(acc: x_t, w: f32, v: x_t) -> x_t {
    return v;
}
#else
const ACC_ZERO: f32 = 0.0;

fn accumulate(acc: f32, w: f32, v: x_t) -> f32 {
    return acc + w * f32(v);
}
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    #{BODY}
#ifdef EXTRAPOLATE
    if (outside) {
        y_store(i, y_t(EXTRAPOLATION()));
        return;
    }
#endif
    y_store(i, y_t(acc));
}
