// GridSample (PyTorch's grid_sample), one thread per output element (n, c, p). The grid holds,
// per batch and output position, normalized coordinates in [-1, 1], last spatial axis first.
// Spatial axes are 3-D here (z, y, x); a missing leading axis samples index 0 with one tap.
// Per axis: denormalize (ALIGN: -1 and 1 are the centers of the end pixels, else their outer
// edges), round to even for nearest, fold a coordinate outside the image back (border: clamp,
// reflection: mirror), then take 1 / 2 / 4 taps whose out-of-image pixels read 0 (zeros: the
// tap's weight is 0), the edge (border) or their mirror image (reflection).
// Buffers: x, grid, y (floats; computed in f32). Defs: MODE (nearest | linear | cubic), PADDING (zeros | border | reflection), ALIGN, RANK,
// TAPS, TY / TZ (taps on the y / z axis: 1 where the axis is missing).
// Params: TOTAL, C, P (output positions per image), ID, IH, IW.
#import common::grid

const TAPS: u32 = #{TAPS}u;

struct Taps {
    idx: array<u32, #{TAPS}>,
    w: array<f32, #{TAPS}>,
}

// The edges a coordinate is folded back into.
fn low_edge() -> f32 {
#ifdef ALIGN
    return 0.0;
#else
    return -0.5;
#endif
}

fn high_edge(len: u32) -> f32 {
#ifdef ALIGN
    return f32(len) - 1.0;
#else
    return f32(len) - 0.5;
#endif
}

// Mirror v into [lo, hi] as many times as needed.
fn reflect(v: f32, lo: f32, hi: f32) -> f32 {
    let span = hi - lo;
    if (span <= 0.0) {
        return lo;
    }
    if (v >= lo && v <= hi) {
        return v;
    }
    let d = select(v - hi, lo - v, v < lo);
    let flips = floor(d / span);
    let r = d - flips * span;
    let even = (u32(flips) % 2u) == 0u;
    if (v < lo) {
        return select(hi - r, lo + r, even);
    }
    return select(lo + r, hi - r, even);
}

// One tap at integer index i: its pixel (index clamped or mirrored) and whether it counts.
fn tap(t: ptr<function, Taps>, j: u32, i: f32, weight: f32, len: u32) {
    let last = f32(len) - 1.0;
#if PADDING == zeros
    (*t).w[j] = select(0.0, weight, i >= 0.0 && i <= last);
    (*t).idx[j] = u32(clamp(i, 0.0, last));
#else if PADDING == border
    (*t).w[j] = weight;
    (*t).idx[j] = u32(clamp(i, 0.0, last));
#else
    (*t).w[j] = weight;
    (*t).idx[j] = u32(clamp(trunc(reflect(i, low_edge(), high_edge(len))), 0.0, last));
#endif
}

#if MODE == cubic
// Keys' cubic convolution weight at distance d (0 <= d <= 2), A = -0.75 as PyTorch.
fn cubic(d: f32) -> f32 {
    let a = -0.75;
    if (d <= 1.0) {
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    }
    return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
}
#endif

fn axis_taps(g: f32, len: u32) -> Taps {
    var t: Taps;
    let n = f32(len);
#ifdef ALIGN
    var v = (g + 1.0) / 2.0 * (n - 1.0);
#else
    var v = ((g + 1.0) * n - 1.0) / 2.0;
#endif
#if MODE == nearest
    v = round(v);  // WGSL rounds halfway cases to even, as PyTorch's nearbyint
#endif
#if MODE != cubic
    // Cubic leaves the coordinate alone and pads each tap (PyTorch, onnxruntime).
    if (v < low_edge() || v > high_edge(len)) {
#if PADDING == border
        v = clamp(v, 0.0, n - 1.0);
#else if PADDING == reflection
        v = reflect(v, low_edge(), high_edge(len));
#endif
    }
#endif
#if MODE == nearest
    tap(&t, 0u, trunc(v), 1.0, len);
#else if MODE == linear
    let i0 = floor(v);
    let f = v - i0;
    tap(&t, 0u, i0, 1.0 - f, len);
    tap(&t, 1u, i0 + 1.0, f, len);
#else
    let i0 = floor(v);
    let s = v - i0;
    tap(&t, 0u, i0 - 1.0, cubic(s + 1.0), len);
    tap(&t, 1u, i0, cubic(s), len);
    tap(&t, 2u, i0 + 1.0, cubic(1.0 - s), len);
    tap(&t, 3u, i0 + 2.0, cubic(2.0 - s), len);
#endif
    return t;
}

// A missing axis: index 0, weight 1.
fn unit_taps() -> Taps {
    var t: Taps;
    t.w[0] = 1.0;
    return t;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    let p = i % P();
    let nc = i / P();
    let n = nc / C();
    let g = (n * P() + p) * #{RANK}u;
    let tx = axis_taps(f32(grid_load(g)), IW());
#if RANK >= 2
    let ty = axis_taps(f32(grid_load(g + 1u)), IH());
#else
    let ty = unit_taps();
#endif
#if RANK == 3
    let tz = axis_taps(f32(grid_load(g + 2u)), ID());
#else
    let tz = unit_taps();
#endif
    let base = nc * ID() * IH() * IW();
    var acc = 0.0;
    for (var a = 0u; a < #{TZ}u; a++) {
        for (var b = 0u; b < #{TY}u; b++) {
            let row = base + (tz.idx[a] * IH() + ty.idx[b]) * IW();
            let wzy = tz.w[a] * ty.w[b];
            for (var q = 0u; q < TAPS; q++) {
                acc += wzy * tx.w[q] * f32(x_load(row + tx.idx[q]));
            }
        }
    }
    y_store(i, y_t(acc));
}
