// Row-wise normalizations: Softmax, LogSoftmax, LayerNorm, RMSNorm (and their Skip* forms).
// A row is K elements x[base + j] (x[base + j * INNER] when STRIDED). LANES threads (a power
// of two, reduction::lanes with RED_INNER 1) share a row: one pass gathers two statistics per
// row, merged through reduction::tree, a second pass writes the outputs. A workgroup serves
// 256 / LANES rows.
// Defs: LANES, RED_INNER (1), OUT (softmax | logsoftmax | layernorm | rmsnorm), ORT_RMS (rmsnorm in
// onnxruntime's order, below; one part, LANES >= 8), STATS (online: running max and
// sum of exp; moments: sums of d and d^2), STRIDED, and the optional buffers' flags: SKIP and
// BIAS (added to x before normalizing), SCALE and BETA (applied after), MEAN_OUT, INV_OUT (per
// row), SUM_OUT (the x + skip + bias that was normalized), X_SCALE (the value normalized is
// X_SCALE() times that: FusedAttention's scores), X_IN_Y (in place: x is y's own buffer, bound
// once read-write; each thread reads an element before it writes it, the statistics pass reads
// the row before any write). Buffers: x (unless X_IN_Y), the optional ones (lower case), y.
// Every float dtype computes in f32.
// Params: ROWS, K, INNER (STRIDED), EPS, SKIP_N / SCALE_N / BETA_N (element counts: those
// operands broadcast over leading dims by index modulo count), X_SCALE.
//
// A row longer than one invocation may loop over (lavapipe stops an invocation's loops after
// ~65,535 iterations) takes two dispatches whose grid row v is part v % PARTS of row v / PARTS,
// CHUNK (def) elements long: with PARTIALS_OUT each part writes its statistics to `partial`
// (two f32 per part) and stops; with PARTIALS_IN a part merges its row's partials (PARTS of
// them, a few per lane) and writes its own elements.
#import reduction::tree

const NEG_MAX: f32 = -3.4028234e38;

#ifdef X_IN_Y
fn x_load(i: u32) -> y_t { return y_load(i); }
#ifdef QUADS
fn x_load4(j: u32) -> vec4<y_t> { return y_load4(j); }
#endif
#endif

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
#ifdef X_SCALE
    v *= X_SCALE();
#endif
    return v;
}

#ifdef QUADS
// Elements j .. j + 3 of the row (x index i .. i + 3, i a multiple of 4) as load(i, j) reads them.
fn load_quad(i: u32, j: u32) -> vec4<f32> {
    var v = vec4<f32>(x_load4(i / 4u));
#ifdef SKIP
    v += vec4<f32>(f32(skip_load(i % SKIP_N())), f32(skip_load((i + 1u) % SKIP_N())),
                   f32(skip_load((i + 2u) % SKIP_N())), f32(skip_load((i + 3u) % SKIP_N())));
#endif
#ifdef BIAS
    v += vec4<f32>(f32(bias_load(j)), f32(bias_load(j + 1u)), f32(bias_load(j + 2u)), f32(bias_load(j + 3u)));
#endif
#ifdef X_SCALE
    v *= X_SCALE();
#endif
    return v;
}
#endif

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

#ifdef ORT_RMS
// x unchanged, in a form the shader compiler cannot see through (x | 1 only for the NaN with
// every bit set, which stays itself): it keeps the two-sum and the split below from being
// simplified away (lavapipe's compiler rewrites a - (a - b) to b).
fn opaque(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    return bitcast<f32>(bits | u32(bits == 0xffffffffu));
}

// v * v + c rounded once, as a fused multiply-add does (WGSL's fma() is two roundings on
// lavapipe): v * v split exactly into p + e (Dekker's product), c + p into s + t (Knuth's
// two-sum), the result s + (t + e).
fn square_add(v: f32, c: f32) -> f32 {
    let p = v * v;
    let k = v * 4097.0;
    let hi = k - opaque(k - v);
    let lo = v - hi;
    let e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo;
    let s = opaque(c + p);
    let b = s - c;
    let t = (c - (s - b)) + (p - b);
    // an infinite (or NaN) sum: the plain one, which is what it is (the two-sum would be NaN)
    return select(c + p, s + (t + e), abs(s) <= bitcast<f32>(0x7f7fffffu));  // finite: <= FLT_MAX
}
#endif

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
#ifdef CHUNK
    let ln = lane_of(wg, ROWS() * PARTS(), K());
    let row = ln.row / PARTS();
    let part = ln.row % PARTS();
    let start = part * #{CHUNK}u;
    let walk = select(0u, min(K() - min(start, K()), #{CHUNK}u), ln.valid);
#else
    let ln = lane_of(wg, ROWS(), K());
    let row = ln.row;
    let part = 0u;
    let start = 0u;
    let walk = ln.length;
#endif
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
#ifdef PARTIALS_IN
    // One part (a symbolic row that is short this time: the statistics pass had no workgroups)
    // walks its row itself.
    if (PARTS() > 1u) {
        for (var p = ln.lane; p < select(0u, PARTS(), ln.valid); p += LANES) {
            let at = 2u * (row * PARTS() + p);
            st = lane_merge(st, vec2<f32>(partial_load(at), partial_load(at + 1u)));
        }
    } else {
        for (var j = start + ln.lane; j < start + walk; j += LANES) {
            st = accumulate(st, load(index_of(base, j), j), c);
        }
    }
#else
#ifdef ORT_RMS
    // onnxruntime's order for an RMS norm's sum of squares (MLAS' AVX2 kernel, which every x86
    // CPU with AVX2 runs): eight running sums, element j < K - K % 8 into sum j % 8 by a fused
    // multiply-add, halved 8 -> 4 -> 2 -> 1 (the lane tree below: lanes past 8 add zeros), then
    // the last K % 8 added one at a time. Int8-quantized activations after the norm then round
    // as onnxruntime's do.
    let whole = walk / 8u * 8u;  // the rest comes after the halving, one element at a time
    if (ln.lane < 8u) {
        for (var j = ln.lane; j < whole; j += 8u) {
            let v = load(index_of(base, j), j);
            st.y = square_add(v, st.y);
        }
    }
#else ifdef QUADS
    for (var j = 4u * ln.lane; j < walk; j += 4u * LANES) {
        let v = load_quad(base + j, j);
        st = accumulate(accumulate(accumulate(accumulate(st, v.x, c), v.y, c), v.z, c), v.w, c);
    }
#else
    for (var j = start + ln.lane; j < start + walk; j += LANES) {
        st = accumulate(st, load(index_of(base, j), j), c);
    }
#endif
#endif
#ifdef ORT_RMS
    var total = tree_merge(ln, st);
    for (var j = whole; j < walk; j++) {  // onnxruntime's scalar tail: a product, then a sum
        let v = load(index_of(base, j), j);
        total.y += opaque(v * v);
    }
#else
    let total = tree_merge(ln, st);
#endif
#ifdef PARTIALS_OUT
    if (ln.valid && ln.lane == 0u) {
        partial_store(2u * ln.row, total.x);
        partial_store(2u * ln.row + 1u, total.y);
    }
#else
    finish(ln, row, part, start, walk, n, base, total, c);
#endif
}

#ifndef PARTIALS_OUT
// Element j of the row, of value v, normalized by its row's statistics: the max `total.x` and
// `inv` (1 / the sum of exps for softmax, its log for logsoftmax, 1 / the deviation for the
// norms, after subtracting `mean` for LayerNorm), then scaled and shifted.
fn normalized(v: f32, j: u32, total: vec2<f32>, mean: f32, inv: f32) -> f32 {
#if OUT == softmax
    var out = exp(v - total.x) * inv;
#else if OUT == logsoftmax
    var out = (v - total.x) - inv;
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
    return out;
}

// Pass 2 of a row (or the only one): the outputs of elements start..start+walk from the row's
// statistics `total`.
fn finish(ln: Lane, row: u32, part: u32, start: u32, walk: u32, n: u32, base: u32, total: vec2<f32>, c: f32) {
    let count = f32(max(n, 1u));
#if OUT == layernorm
    let dm = total.x / count;
    let mean = c + dm;
    let inv = 1.0 / sqrt(max(total.y / count - dm * dm, 0.0) + EPS());
#else if OUT == rmsnorm
    let mean = 0.0;  // SkipSimplifiedLayerNormalization's mean output is unused: zeros
    let inv = 1.0 / sqrt(total.y / count + EPS());
#else if OUT == softmax
    let mean = 0.0;
    let inv = 1.0 / total.y;
#else
    let mean = 0.0;
    let inv = log(total.y);  // logsoftmax
#endif
#ifdef QUADS
    for (var j = 4u * ln.lane; j < walk; j += 4u * LANES) {
        let v = load_quad(base + j, j);
        y_store4((base + j) / 4u, vec4<f32>(normalized(v.x, j, total, mean, inv),
                                            normalized(v.y, j + 1u, total, mean, inv),
                                            normalized(v.z, j + 2u, total, mean, inv),
                                            normalized(v.w, j + 3u, total, mean, inv)));
#ifdef SUM_OUT
        sum_out_store(base + j, sum_out_t(v.x));
        sum_out_store(base + j + 1u, sum_out_t(v.y));
        sum_out_store(base + j + 2u, sum_out_t(v.z));
        sum_out_store(base + j + 3u, sum_out_t(v.w));
#endif
    }
#else
    for (var j = start + ln.lane; j < start + walk; j += LANES) {
        let i = index_of(base, j);
        let v = load(i, j);
        y_store(i, y_t(normalized(v, j, total, mean, inv)));
#ifdef SUM_OUT
        sum_out_store(i, sum_out_t(v));
#endif
    }
#endif
#ifdef MEAN_OUT
    if (ln.valid && ln.lane == 0u && part == 0u) {
        mean_out_store(row, mean_out_t(mean));
    }
#endif
#ifdef INV_OUT
    if (ln.valid && ln.lane == 0u && part == 0u) {
        inv_out_store(row, inv_out_t(inv));
    }
#endif
}
#endif
