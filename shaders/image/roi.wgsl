// RoiAlign and MaxRoiPool: each output bin (roi r, channel c, ph, pw) pools the samples of its
// part of the roi. How many depends on the rois (RoiAlign's adaptive sampling grid is
// ceil(roi size / output size) per axis), so LANES threads share a bin (reduction::lanes) and
// meet in reduction::tree, and the samples a bin can have are bounded by construction: only
// those near the image can count (samples of an adaptive grid are at least half a pixel apart,
// so at most NY_MAX = 2H + 5 rows of them, NX_MAX columns, fall within a pixel of it), and
// each lane takes every (LANES * CHUNKS)-th of at most NY_MAX * NX_MAX candidates. Where that
// is still too many for one invocation (operators/image/roi.py keeps it under LIMIT), CHUNKS rows per
// bin pool a part each into `partial`, and the FINISH stage combines them.
//
// Defs: MODE (align_avg | align_max | max_pool), HALF_PIXEL (RoiAlign's half_pixel mode),
//   STAGE (pool | finish), SINGLE (one chunk: pool writes y directly), LANES, RED_INNER (1).
// Buffers: x, rois (and RoiAlign's batch_indices) in; y, or the f32 scratch `partial`.
// Params: ROWS (bins * CHUNKS), CHUNKS, N, C, H, W, OH, OW, SCALE (spatial_scale), RATIO
//   (RoiAlign's sampling_ratio; 0: adaptive), NY_MAX, NX_MAX.
#import reduction::tree

// (value, seen): a sum (avg; seen unused) or a max and whether any sample was taken.
alias LaneValue = vec2<f32>;

fn lane_merge(a: LaneValue, b: LaneValue) -> LaneValue {
#if MODE == align_avg
    return vec2<f32>(a.x + b.x, 0.0);
#else
    if (a.y == 0.0) {
        return b;
    }
    if (b.y == 0.0) {
        return a;
    }
    return vec2<f32>(max(a.x, b.x), 1.0);
#endif
}

// What a pooled LaneValue puts in y.
fn final_value(v: LaneValue) -> f32 {
#if MODE == align_avg
    return v.x;
#else
    return select(0.0, v.x, v.y != 0.0);
#endif
}

#if STAGE == pool
// Where a bin's candidate samples lie: sample (iy, ix) of the rectangle [y0, y0 + ny) x
// [x0, x0 + nx) sits at (ay + (iy + 0.5) * sy, ax + (ix + 0.5) * sx) (RoiAlign) or at pixel
// (y0 + iy, x0 + ix) (MaxRoiPool); `all` is false where the rectangle leaves out samples of
// the grid (they are outside the image: 0 for RoiAlign's max).
struct Bin {
    plane: u32,  // x's offset of the bin's image and channel; NONE: a roi of no image
    ay: f32,
    ax: f32,
    sy: f32,
    sx: f32,
    y0: u32,
    x0: u32,
    ny: u32,
    nx: u32,
    all: bool,
    count: f32,  // RoiAlign's avg divides by it
}

const NONE: u32 = 0xffffffffu;

// round() half away from zero, as the C++ reference's std::round.
fn round_away(v: f32) -> f32 {
    return sign(v) * floor(abs(v) + 0.5);
}

#if MODE == max_pool
fn bin_of(bin: u32) -> Bin {
    var b: Bin;
    let r = bin / (C() * OH() * OW());
    let c = (bin / (OH() * OW())) % C();
    let ph = (bin / OW()) % OH();
    let pw = bin % OW();
    let n = i32(rois_load(5u * r));
    b.plane = select(NONE, (u32(n) * C() + c) * H() * W(), n >= 0 && u32(n) < N());
    let sw = i32(round_away(rois_load(5u * r + 1u) * SCALE()));
    let sh = i32(round_away(rois_load(5u * r + 2u) * SCALE()));
    let ew = i32(round_away(rois_load(5u * r + 3u) * SCALE()));
    let eh = i32(round_away(rois_load(5u * r + 4u) * SCALE()));
    let bh = f32(max(eh - sh + 1, 1)) / f32(OH());
    let bw = f32(max(ew - sw + 1, 1)) / f32(OW());
    let hs = clamp(i32(floor(f32(ph) * bh)) + sh, 0, i32(H()));
    let he = clamp(i32(ceil(f32(ph + 1u) * bh)) + sh, 0, i32(H()));
    let ws = clamp(i32(floor(f32(pw) * bw)) + sw, 0, i32(W()));
    let we = clamp(i32(ceil(f32(pw + 1u) * bw)) + sw, 0, i32(W()));
    b.y0 = u32(hs);
    b.x0 = u32(ws);
    b.ny = u32(max(he - hs, 0));
    b.nx = u32(max(we - ws, 0));
    b.all = true;
    return b;
}
#else
// The samples of one axis: grid size g, first sample a + 0.5 * s, step s; the range of those
// within a pixel of [0, len] (one more on each side against rounding), at most most_n long.
struct Axis {
    a: f32,
    s: f32,
    g: f32,
    lo: u32,
    n: u32,
}

fn axis_of(start: f32, end: f32, p: u32, out: u32, len: u32, most_n: u32) -> Axis {
    var size = end - start;
#ifndef HALF_PIXEL
    size = max(size, 1.0);  // the legacy mode makes malformed rois 1 x 1
#endif
    let bin = size / f32(out);
    var g = f32(RATIO());
    if (RATIO() == 0u) {
        g = max(ceil(bin), 0.0);
    }
    var ax: Axis;
    ax.a = start + f32(p) * bin;
    ax.s = bin / g;
    ax.g = g;
    var lo = 0.0;
    var hi = g - 1.0;
    if (g > 0.0 && ax.s > 0.0) {
        lo = clamp(ceil((-1.0 - ax.a) / ax.s - 0.5) - 1.0, 0.0, g);
        hi = clamp(floor((f32(len) - ax.a) / ax.s - 0.5) + 1.0, -1.0, g - 1.0);
    }
    ax.lo = u32(lo);
    ax.n = u32(clamp(hi - lo + 1.0, 0.0, f32(most_n)));
    return ax;
}

fn bin_of(bin: u32) -> Bin {
    var b: Bin;
    let r = bin / (C() * OH() * OW());
    let c = (bin / (OH() * OW())) % C();
    let ph = (bin / OW()) % OH();
    let pw = bin % OW();
    let n = i32(batch_indices_load(r));
    b.plane = select(NONE, (u32(n) * C() + c) * H() * W(), n >= 0 && u32(n) < N());
#ifdef HALF_PIXEL
    let offset = 0.5;
#else
    let offset = 0.0;
#endif
    let y = axis_of(rois_load(4u * r + 1u) * SCALE() - offset, rois_load(4u * r + 3u) * SCALE() - offset, ph, OH(), H(),
                    NY_MAX());
    let x = axis_of(rois_load(4u * r) * SCALE() - offset, rois_load(4u * r + 2u) * SCALE() - offset, pw, OW(), W(),
                    NX_MAX());
    b.ay = y.a;
    b.ax = x.a;
    b.sy = y.s;
    b.sx = x.s;
    b.y0 = y.lo;
    b.x0 = x.lo;
    b.ny = y.n;
    b.nx = x.n;
    b.all = f32(y.n) * f32(x.n) >= y.g * x.g;
    b.count = max(y.g * x.g, 1.0);
    return b;
}

// One RoiAlign sample: the bilinear taps of (y, x), as the reference computes them.
fn sample(plane: u32, yy: f32, xx: f32) -> LaneValue {
    if (yy < -1.0 || yy > f32(H()) || xx < -1.0 || xx > f32(W())) {
        return vec2<f32>(0.0, 1.0);  // outside: a 0 (it counts for the max too)
    }
    var fy = max(yy, 0.0);
    var fx = max(xx, 0.0);
    var y_low = u32(fy);
    var x_low = u32(fx);
    var y_high = y_low + 1u;
    var x_high = x_low + 1u;
    if (y_low >= H() - 1u) {
        y_low = H() - 1u;
        y_high = y_low;
        fy = f32(y_low);
    }
    if (x_low >= W() - 1u) {
        x_low = W() - 1u;
        x_high = x_low;
        fx = f32(x_low);
    }
    let ly = fy - f32(y_low);
    let lx = fx - f32(x_low);
    let hy = 1.0 - ly;
    let hx = 1.0 - lx;
    let v1 = hy * hx * f32(x_load(plane + y_low * W() + x_low));
    let v2 = hy * lx * f32(x_load(plane + y_low * W() + x_high));
    let v3 = ly * hx * f32(x_load(plane + y_high * W() + x_low));
    let v4 = ly * lx * f32(x_load(plane + y_high * W() + x_high));
#if MODE == align_avg
    return vec2<f32>(v1 + v2 + v3 + v4, 1.0);
#else
    return vec2<f32>(max(max(v1, v2), max(v3, v4)), 1.0);
#endif
}
#endif
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#if STAGE == pool
    let ln = lane_of(wg, ROWS(), 1u);
    let row = select(0u, ln.row, ln.valid);
    let chunk = row % CHUNKS();
    let b = bin_of(row / CHUNKS());
    var acc = vec2<f32>(0.0);
    var total = b.ny * b.nx;
    if (!ln.valid || b.plane == NONE) {
        total = 0u;
    }
#if MODE == align_max
    if (!b.all && total > 0u && ln.lane == 0u && chunk == 0u) {
        acc = vec2<f32>(0.0, 1.0);  // samples left out are outside the image: a 0
    }
#endif
    // At most ceil(NY_MAX * NX_MAX / (LANES * CHUNKS)) turns (operators/image/roi.py bounds it).
    for (var s = chunk * LANES + ln.lane; s < total; s += LANES * CHUNKS()) {
        let iy = b.y0 + s / b.nx;
        let ix = b.x0 + s % b.nx;
#if MODE == max_pool
        acc = lane_merge(acc, vec2<f32>(f32(x_load(b.plane + iy * W() + ix)), 1.0));
#else
        let v = sample(b.plane, b.ay + (f32(iy) + 0.5) * b.sy, b.ax + (f32(ix) + 0.5) * b.sx);
        acc = lane_merge(acc, v);
#endif
    }
    var pooled = tree_merge(ln, acc);
#if MODE == align_avg
    pooled.x = pooled.x / b.count;  // a chunk's share of the mean: the chunks add up
#endif
    if (ln.valid && ln.lane == 0u) {
#ifdef SINGLE
        y_store(row, final_value(pooled));
#else
        partial_store(2u * row, pooled.x);
        partial_store(2u * row + 1u, pooled.y);
#endif
    }
#else
    // FINISH: one thread per bin merges its CHUNKS partial results.
    let bin = grid_thread(wg);
    if (bin * CHUNKS() >= ROWS()) { return; }
    var acc = vec2<f32>(0.0);
    for (var k = 0u; k < CHUNKS(); k++) {
        let r = bin * CHUNKS() + k;
        acc = lane_merge(acc, vec2<f32>(partial_load(2u * r), partial_load(2u * r + 1u)));
    }
    y_store(bin, final_value(acc));
#endif
}
