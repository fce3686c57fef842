// RMS norm fused with MatMulNBits accuracy_level 4's activation quantization (onyxia::RmsNormQ8,
// made by passes/quantize_sharing.py from (Skip)SimplifiedLayerNormalization + QuantizeQ8):
// per row m of x [M, K], v = x (+ skip) (+ bias) (written to s with SUM_OUT: the Skip form's
// input_skip_bias_sum), y = v / sqrt(mean(v^2) + eps) * gamma (written to y: on adapters that
// are not CPU-type the MatMulNBits consumers quantize y themselves), then y quantized per block
// exactly as quantize_q8_chunked.wgsl does (scale = max|y| / 127, q = round(y * 127 / max|y|),
// the paired-nibble word layout, sa and qsum): one dispatch instead of two.
// One workgroup per row: 64 threads sum v^2 over k = lid, lid + 64, ... (K / 64 iterations),
// a tree adds them, then each thread writes whole blocks (blk = lid, lid + 64, ...). K is
// whole blocks; the planner keeps K <= 32 * 16384, so a thread's loops run < 3 K / 64 times.
// Buffers: x, [skip], gamma, [bias], y, [s], qa (u32 words), sa, qsum (f32 everywhere).
// Defs: SKIP, HAS_BIAS, SUM_OUT. Params: M, K, BLOCK, NBLK, EPS.
#import common::grid

var<workgroup> part: array<f32, 64>;

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

@compute @workgroup_size(64)
fn main(wg: Grid) {
    let row = grid_group(wg);
    let live = row < M();  // a folded grid's surplus workgroups compute row M - 1 and store nothing
    let m = min(row, M() - 1u);
    let lid = wg.lid;
    let base = m * K();
    var squares = 0.0;
    for (var k = lid; k < K(); k += 64u) {
        let v = value(base, k);
#ifdef SUM_OUT
        if (live) {
            s_store(base + k, s_t(v));
        }
#endif
        squares += v * v;
    }
    part[lid] = squares;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            part[lid] += part[lid + stride];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(part[0] / f32(K()) + EPS());
    for (var blk = lid; blk < NBLK(); blk += 64u) {
        let k0 = blk * BLOCK();
        var peak = 0.0;
        for (var j = 0u; j < BLOCK(); j++) {
            let y = value(base, k0 + j) * inv * f32(gamma_load(k0 + j));
            peak = max(peak, abs(y));
            if (live) {
                y_store(base + k0 + j, y_t(y));
            }
        }
        // 127 / max, not 1 / scale: onnxruntime's rounding (see quantize_q8.wgsl)
        let inverse = select(0.0, 127.0 / peak, peak != 0.0);
        let t = m * NBLK() + blk;
        let words = t * (BLOCK() / 4u);
        var total = 0i;
        for (var e = 0u; e < BLOCK() / 8u; e++) {
            var even = 0u;
            var odd = 0u;
            for (var j = 0u; j < 4u; j++) {
                let k = k0 + 8u * e + 2u * j;
                let q0 = i32(round(value(base, k) * inv * f32(gamma_load(k)) * inverse));
                let q1 = i32(round(value(base, k + 1u) * inv * f32(gamma_load(k + 1u)) * inverse));
                total += q0 + q1;
                even |= (u32(q0) & 255u) << (8u * j);
                odd |= (u32(q1) & 255u) << (8u * j);
            }
            if (live) {
                qa_store(words + 2u * e, even);
                qa_store(words + 2u * e + 1u, odd);
            }
        }
        if (live) {
            sa_store(t, peak / 127.0);
            qsum_store(t, f32(total));
        }
    }
}
