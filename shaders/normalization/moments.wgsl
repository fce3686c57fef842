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
#import reduction::tree

// The two sums of a row's lanes meet in reduction::tree.
alias LaneValue = vec2<f32>;

fn lane_merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return a + b;
}

#{BASE}

#{OFFSET}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let ln = lane_of(wg, M(), K());
    let n = ln.length;
    let base = base_of(select(0u, ln.row, ln.valid));
    // Sums of d = x - c and d^2, c the row's first element: accurate when |mean| >> std.
    var c = 0.0;
#if OUT == meanvar
    if (n > 0u) {
        c = f32(x_load(base + offset_of(0u)));
    }
#endif
    var st = vec2<f32>(0.0);
    for (var r = ln.lane; r < n; r += LANES) {
        let d = f32(x_load(base + offset_of(r))) - c;
#if OUT == lp1
        st += vec2<f32>(abs(d), 0.0);
#else
        st += vec2<f32>(d, d * d);
#endif
    }
    let total = tree_merge(ln, st);
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
    for (var r = ln.lane; r < n; r += LANES) {
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
