// Normalization by statistics over a strided walk (InstanceNorm, GroupNorm, MVN, LpNorm):
// row o is the elements x[base_of(o) + offset_of(r)], r < K. LANES threads share a row
// (reduction::lanes, laid out by RED_INNER as in reduction/reduce.wgsl) and merge two sums
// through reduction::tree; a second pass writes y at the same positions.
// Defs: LANES, RED_INNER, BASE / OFFSET (generated walk functions), OUT:
//   meanvar  y = (x - mean) / sqrt(var + EPS), or / (sqrt(var) + EPS) with EPS_OUTSIDE;
//   lp1/lp2  y = x / (sum |x| | sqrt(sum x^2)), 0 where the norm is 0.
// SCALE / BIAS (buffers scale / bias): per-channel affine, channel of element f being
// (f / CH_INNER) % CH_COUNT. Buffers: x, [scale], [bias], y; computed in f32.
// Params: M (rows), K, EPS, CH_INNER, CH_COUNT, and the walks' dims and strides.
// A row longer than one invocation may loop over (lavapipe stops an invocation's loops after
// ~65,535 iterations) takes two dispatches whose grid row v is part `part` of row o (RED_INNER
// 1: v = o * PARTS + part; 0: v = part * M + o), CHUNK (def) elements long: with PARTIALS_OUT
// each part writes its two sums to `partial` (at 2v) and stops; with PARTIALS_IN a part merges
// its row's PARTS partials (a few per lane; walks the row itself when PARTS is 1) and writes its
// elements.
#import reduction::tree

// The two sums of a row's lanes meet in reduction::tree.
alias LaneValue = vec2<f32>;

fn lane_merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return a + b;
}

#{BASE}

#{OFFSET}

#ifdef PARTIALS_IN
// The grid row of part p of row o.
fn part_row(o: u32, p: u32) -> u32 {
#if RED_INNER == 1
    return o * PARTS() + p;
#else
    return p * M() + o;
#endif
}
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#ifdef CHUNK
    let ln = lane_of(wg, M() * PARTS(), K());
#if RED_INNER == 1
    let o = ln.row / PARTS();
    let part = ln.row % PARTS();
#else
    let o = ln.row % M();
    let part = ln.row / M();
#endif
    let start = part * #{CHUNK}u;
    let walk = select(0u, min(K() - min(start, K()), #{CHUNK}u), ln.valid);
#else
    let ln = lane_of(wg, M(), K());
    let o = ln.row;
    let start = 0u;
    let walk = ln.length;
#endif
    let n = ln.length;
    let base = base_of(select(0u, o, ln.valid));
    // Sums of d = x - c and d^2, c the row's first element: accurate when |mean| >> std.
    var c = 0.0;
#if OUT == meanvar
    if (n > 0u) {
        c = f32(x_load(base + offset_of(0u)));
    }
#endif
    var st = vec2<f32>(0.0);
#ifdef PARTIALS_IN
    if (PARTS() > 1u) {
        for (var p = ln.lane; p < select(0u, PARTS(), ln.valid); p += LANES) {
            let at = 2u * part_row(o, p);
            st += vec2<f32>(partial_load(at), partial_load(at + 1u));
        }
    } else {
        st = walk_sums(ln, base, start, walk, c);
    }
#else
    st = walk_sums(ln, base, start, walk, c);
#endif
    let total = tree_merge(ln, st);
#ifdef PARTIALS_OUT
    if (ln.valid && ln.lane == 0u) {
        partial_store(2u * ln.row, total.x);
        partial_store(2u * ln.row + 1u, total.y);
    }
#else
    finish(ln, base, start, walk, n, total, c);
#endif
}

// This lane's sums of d = x - c and d^2 (|d| for lp1) over elements start..start+walk.
fn walk_sums(ln: Lane, base: u32, start: u32, walk: u32, c: f32) -> vec2<f32> {
    var st = vec2<f32>(0.0);
    for (var r = start + ln.lane; r < start + walk; r += LANES) {
        let d = f32(x_load(base + offset_of(r))) - c;
#if OUT == lp1
        st += vec2<f32>(abs(d), 0.0);
#else
        st += vec2<f32>(d, d * d);
#endif
    }
    return st;
}

#ifndef PARTIALS_OUT
// The outputs of elements start..start+walk from the row's sums.
fn finish(ln: Lane, base: u32, start: u32, walk: u32, n: u32, total: vec2<f32>, c: f32) {
#if OUT == meanvar
    let count = f32(max(n, 1u));
    let dm = total.x / count;
    let mean = c + dm;
    let variance = max(total.y / count - dm * dm, 0.0);
#ifdef EPS_OUTSIDE
    let inv = 1.0 / (sqrt(variance) + EPS());
#else
    let inv = 1.0 / sqrt(variance + EPS());
#endif
#else
    let mean = 0.0;
#if OUT == lp1
    let norm = total.x;
#else
    let norm = sqrt(total.y);
#endif
    let inv = select(1.0 / norm, 0.0, norm == 0.0);
#endif
    for (var r = start + ln.lane; r < start + walk; r += LANES) {
        let f = base + offset_of(r);
        var v = (f32(x_load(f)) - mean) * inv;
#ifdef SCALE
        v *= f32(scale_load((f / CH_INNER()) % CH_COUNT()));
#endif
#ifdef BIAS
        v += f32(bias_load((f / CH_INNER()) % CH_COUNT()));
#endif
        y_store(f, y_t(v));
    }
}
#endif
