// RMS norm fused with MatMulNBits accuracy_level 4's activation quantization (onyxia::RmsNormQ8,
// made by passes/quantize_sharing.py from (Skip)SimplifiedLayerNormalization + QuantizeQ8):
// per row m of x [M, K], v = x (+ skip) (+ bias) (written to s with SUM_OUT: the Skip form's
// input_skip_bias_sum), y = v / sqrt(mean(v^2) + eps) * gamma (written to y unless STORE_Y is 0:
// on CPU-type adapters the MatMulNBits consumers read only the int8 activation), then y
// quantized per block exactly as quantize_q8_chunked.wgsl does (scale = max|y| / 127, q =
// round(y * 127 / max|y|), its pair-word layout, sa and qsum): one dispatch instead of two.
// One workgroup of WG threads per row (WG 64, or 8 for CPU-type adapters, where lavapipe runs a
// workgroup 8 threads at a time and each barrier switches between those groups): the threads
// sum v^2 as 64 partial sums (PARTS), a tree adds them, then each thread writes whole blocks
// (blk = lid, lid + WG, ...), reading elements as vec4s (K is whole blocks of >= 32). A thread's
// loops run about 11 K / (8 WG) + 64 times: < 46,000 for WG 8 at the K <= 32 * 8192 the pass
// fuses (quantized.RMSNORM_Q8_MAX_K).
// Buffers: x, [skip], gamma, [bias] (vec4 reads), y, [s], qa (u32 words), sa, qsum (f32 everywhere).
// Defs: WG, SKIP, HAS_BIAS, SUM_OUT. Params: M, K, BLOCK, NBLK, EPS, STORE_Y.
#import common::grid

const WG = #{WG}u;
// The sum of squares goes in the order of 64 threads whatever WG is (thread t sums k = t, t + 64,
// ..., a tree adds the 64): int8 quantization turns a last-bit change of the norm into whole
// steps, and this order is the one measured against onnxruntime's on the exported fixtures.
const PARTS = 64u;

var<workgroup> part: array<f32, PARTS>;

// Element k of row `base` of x (+ skip) (+ bias).
fn value(base: u32, k: u32) -> f32 {
    var v = f32(x_load(base + k));
#ifdef SKIP
    v += f32(skip_load(base + k));
#endif
#ifdef HAS_BIAS
    v += f32(bias_load(k));
#endif
    return v;
}

// Elements 4 k4 .. 4 k4 + 3 of row base4 (in vec4s) of x (+ skip) (+ bias).
fn value4(base4: u32, k4: u32) -> vec4<f32> {
    var v = vec4<f32>(x_load4(base4 + k4));
#ifdef SKIP
    v += vec4<f32>(skip_load4(base4 + k4));
#endif
#ifdef HAS_BIAS
    v += vec4<f32>(bias_load4(k4));
#endif
    return v;
}

// The normalized row's elements 4 k4 .. 4 k4 + 3 (inv = 1 / rms).
fn normed4(base4: u32, k4: u32, inv: f32) -> vec4<f32> {
    return value4(base4, k4) * inv * vec4<f32>(gamma_load4(k4));
}

@compute @workgroup_size(#{WG})
fn main(wg: Grid) {
    let row = grid_group(wg);
    let live = row < M();  // a folded grid's surplus workgroups compute row M - 1 and store nothing
    let m = min(row, M() - 1u);
    let lid = wg.lid;
    let base = m * K();
    let base4 = base / 4u;
    for (var t = lid; t < PARTS; t += WG) {
        var squares = 0.0;
        for (var k = t; k < K(); k += PARTS) {
            let v = value(base, k);
#ifdef SUM_OUT
            if (live) {
                s_store(base + k, s_t(v));
            }
#endif
            squares += v * v;
        }
        part[t] = squares;
    }
    workgroupBarrier();
    for (var stride = PARTS / 2u; stride > 0u; stride >>= 1u) {
        for (var t = lid; t < stride; t += WG) {
            part[t] += part[t + stride];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(part[0] / f32(K()) + EPS());
    let store_y = live && STORE_Y() != 0u;
    for (var blk = lid; blk < NBLK(); blk += WG) {
        let b4 = blk * BLOCK() / 4u;
        var peak = 0.0;
        for (var j = 0u; j < BLOCK() / 4u; j++) {
            let y = normed4(base4, b4 + j, inv);
            peak = max(peak, max(max(abs(y.x), abs(y.y)), max(abs(y.z), abs(y.w))));
            if (store_y) {
                for (var e = 0u; e < 4u; e++) {
                    y_store(base + 4u * (b4 + j) + e, y_t(y[e]));
                }
            }
        }
        // 127 / max, not 1 / scale: onnxruntime's rounding (see quantize_q8.wgsl)
        let inverse = select(0.0, 127.0 / peak, peak != 0.0);
        let t = m * NBLK() + blk;
        let words = t * (BLOCK() / 2u);
        var total = 0i;
        for (var e = 0u; e < BLOCK() / 8u; e++) {
            // values 8e .. 8e + 7: pair word j holds value j + 4 + 65536 * value j
            let lo = vec4<i32>(round(normed4(base4, b4 + 2u * e, inv) * inverse));
            let hi = vec4<i32>(round(normed4(base4, b4 + 2u * e + 1u, inv) * inverse));
            total += lo.x + lo.y + lo.z + lo.w + hi.x + hi.y + hi.z + hi.w;
            if (live) {
                let pairs = bitcast<vec4<u32>>(hi + 65536 * lo);  // 4 stores, no loop: the trip count stays
                qa_store(words + 4u * e, pairs.x);
                qa_store(words + 4u * e + 1u, pairs.y);
                qa_store(words + 4u * e + 2u, pairs.z);
                qa_store(words + 4u * e + 3u, pairs.w);
            }
        }
        if (live) {
            sa_store(t, peak / 127.0);
            qsum_store(t, f32(total));
        }
    }
}
