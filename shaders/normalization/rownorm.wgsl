// Row-wise normalizations: Softmax, LogSoftmax, LayerNorm, RMSNorm (and their Skip* forms).
// A row is K elements x[base + j] (x[base + j * INNER] when STRIDED). LANES threads (a power
// of two, reduction::lanes with RED_INNER 1) share a row: one pass gathers two statistics per
// row, merged through reduction::tree, a second pass writes the outputs. A workgroup serves
// 256 / LANES rows.
// Defs: LANES, RED_INNER (1), OUT (softmax | logsoftmax | layernorm | rmsnorm), STATS (online: running max and
// sum of exp; moments: sums of d and d^2), STRIDED, optional bindings with their numbers
// B_<NAME>: SKIP and BIAS (added to x before normalizing), SCALE and BETA (applied after),
// MEAN_OUT, INV_OUT (per row), SUM_OUT (the x + skip + bias that was normalized).
// Params: ROWS, K, INNER (STRIDED), EPS, SKIP_N / SCALE_N / BETA_N (element counts: those
// operands broadcast over leading dims by index modulo count).
#import reduction::tree

@group(0) @binding(0) var<storage, read> x_in: array<f32>;
#ifdef SKIP
@group(0) @binding(#{B_SKIP}) var<storage, read> skip_in: array<f32>;
#endif
#ifdef BIAS
@group(0) @binding(#{B_BIAS}) var<storage, read> bias_in: array<f32>;
#endif
#ifdef SCALE
@group(0) @binding(#{B_SCALE}) var<storage, read> scale_in: array<f32>;
#endif
#ifdef BETA
@group(0) @binding(#{B_BETA}) var<storage, read> beta_in: array<f32>;
#endif
@group(0) @binding(#{B_Y}) var<storage, read_write> y: array<f32>;
#ifdef MEAN_OUT
@group(0) @binding(#{B_MEAN_OUT}) var<storage, read_write> mean_out: array<f32>;
#endif
#ifdef INV_OUT
@group(0) @binding(#{B_INV_OUT}) var<storage, read_write> inv_out: array<f32>;
#endif
#ifdef SUM_OUT
@group(0) @binding(#{B_SUM_OUT}) var<storage, read_write> sum_out: array<f32>;
#endif

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
    var v = x_in[i];
#ifdef SKIP
    v += skip_in[i % SKIP_N()];
#endif
#ifdef BIAS
    v += bias_in[j];
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
        out *= scale_in[j % SCALE_N()];
#endif
#ifdef BETA
        out += beta_in[j % BETA_N()];
#endif
        y[i] = out;
#ifdef SUM_OUT
        sum_out[i] = v;
#endif
    }
#ifdef MEAN_OUT
    if (ln.valid && ln.lane == 0u) {
        mean_out[row] = mean;
    }
#endif
#ifdef INV_OUT
    if (ln.valid && ln.lane == 0u) {
        inv_out[row] = inv;
    }
#endif
}
