// Row-wise normalizations: Softmax, LogSoftmax, LayerNorm, RMSNorm (and their Skip* forms).
// A row is K elements x[base + j] (x[base + j * INNER] when STRIDED). LANES threads (a power
// of two, reduction::lanes with RED_INNER 1) share a row: one pass gathers two statistics per
// row, merged through reduction::tree, a second pass writes the outputs. A workgroup serves
// 256 / LANES rows.
// Defs: LANES, RED_INNER (1), OUT (softmax | logsoftmax | layernorm | rmsnorm), STATS (online: running max and
// sum of exp; moments: sums of d and d^2), STRIDED, and the optional buffers' flags: SKIP and
// BIAS (added to x before normalizing), SCALE and BETA (applied after), MEAN_OUT, INV_OUT (per
// row), SUM_OUT (the x + skip + bias that was normalized). Buffers: x, the optional ones
// (lower case), y. Every float dtype computes in f32.
// Params: ROWS, K, INNER (STRIDED), EPS, SKIP_N / SCALE_N / BETA_N (element counts: those
// operands broadcast over leading dims by index modulo count).
#import reduction::tree

const NEG_MAX: f32 = -3.4028234e38;

fn index_of(base: u32, j: u32) -> u32 {
#ifdef STRIDED
    return base + j * INNER();
#else
    return base + j;
#endif
}

// The value normalized: x, plus skip and bias for the Skip* ops.
fn load(i: u32, j: u32) -> f32 {
    var v = f32(x_load(i));
#ifdef SKIP
    v += f32(skip_load(i % SKIP_N()));
#endif
#ifdef BIAS
    v += f32(bias_load(j));
#endif
    return v;
}

// online: (max, sum of exp(v - max)), rescaled when the max grows (one pass, no overflow).
// moments: (sum, sum of squares) of d = v - c; c is the row's first element for LayerNorm so
// that the variance stays accurate when |mean| >> std, 0 for RMSNorm.
fn accumulate(st: vec2<f32>, v: f32, c: f32) -> vec2<f32> {
#if STATS == online
    if (v <= NEG_MAX) {
        return st;  // exp(-inf) adds nothing
    }
    if (v > st.x) {
        return vec2<f32>(v, st.y * exp(st.x - v) + 1.0);
    }
    return vec2<f32>(st.x, st.y + exp(v - st.x));
#else
    let d = v - c;
    return st + vec2<f32>(d, d * d);
#endif
}

alias LaneValue = vec2<f32>;

fn lane_merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
#if STATS == online
    let m = max(a.x, b.x);
    var s = 0.0;
    if (a.y > 0.0) {
        s += a.y * exp(a.x - m);
    }
    if (b.y > 0.0) {
        s += b.y * exp(b.x - m);
    }
    return vec2<f32>(m, s);
#else
    return a + b;
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let ln = lane_of(wg, ROWS(), K());
    let row = ln.row;
    let n = ln.length;
#ifdef STRIDED
    let base = (row / INNER()) * K() * INNER() + row % INNER();
#else
    let base = row * K();
#endif
    var c = 0.0;
#if OUT == layernorm
    if (n > 0u) {
        c = load(base, 0u);
    }
#endif
#if STATS == online
    var st = vec2<f32>(bitcast<f32>(0xff800000u), 0.0);
#else
    var st = vec2<f32>(0.0);
#endif
    for (var j = ln.lane; j < n; j += LANES) {
        st = accumulate(st, load(index_of(base, j), j), c);
    }
    let total = tree_merge(ln, st);
    let count = f32(max(n, 1u));
#if OUT == layernorm
    let dm = total.x / count;
    let mean = c + dm;
    let inv = 1.0 / sqrt(max(total.y / count - dm * dm, 0.0) + EPS());
#else if OUT == rmsnorm
    let mean = 0.0;  // SkipSimplifiedLayerNormalization's mean output is unused: zeros
    let inv = 1.0 / sqrt(total.y / count + EPS());
#else if OUT == logsoftmax
    let lse = log(total.y);
#endif
    for (var j = ln.lane; j < n; j += LANES) {
        let i = index_of(base, j);
        let v = load(i, j);
#if OUT == softmax
        var out = exp(v - total.x) / total.y;
#else if OUT == logsoftmax
        var out = (v - total.x) - lse;
#else if OUT == layernorm
        var out = (v - mean) * inv;
#else
        var out = v * inv;
#endif
#ifdef SCALE
        out *= f32(scale_load(j % SCALE_N()));
#endif
#ifdef BETA
        out += f32(beta_load(j % BETA_N()));
#endif
        y_store(i, y_t(out));
#ifdef SUM_OUT
        sum_out_store(i, sum_out_t(v));
#endif
    }
#ifdef MEAN_OUT
    if (ln.valid && ln.lane == 0u) {
        mean_out_store(row, mean_out_t(mean));
    }
#endif
#ifdef INV_OUT
    if (ln.valid && ln.lane == 0u) {
        inv_out_store(row, inv_out_t(inv));
    }
#endif
}
