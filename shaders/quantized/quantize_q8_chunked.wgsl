// MatMulNBits accuracy_level 4, step 1 of the chunked variant (matmul_nbits_chunked.wgsl): the
// activation a [M, K] quantized to int8 per block of BLOCK values along K exactly as
// quantize_q8.wgsl does (onnxruntime's MLAS CompInt8: scale = max|a| / 127, q = round(a * 127 /
// max|a|), ties to even, 0 past K), one invocation per (row, block), no barriers.
// The values go out paired for matmul_nbits_chunked.wgsl's 16-bit-lane products: of every 8
// values q0..q7, 4 words q[j + 4] + 65536 q[j] (j = 0..3, as i32 bits), 2 words a value. Also
// written: sa[m * NBLK + blk] = scale and qsum[m * NBLK + blk] = the block's sum of q (zero
// points are applied as dot(q_w - z, q_a) = dot(q_w, q_a) - z * sum(q_a)).
// Buffers: a (any float dtype), qa (u32 words, BLOCK / 2 per block), sa, qsum.
// Params: M, K, BLOCK, NBLK.
#import common::grid

fn value(m: u32, k: u32) -> f32 {
    if (k < K()) {
        return f32(a_load(m * K() + k));
    }
    return 0.0;
}

// Small workgroups: a decode step has only NBLK (row, block) pairs, and lavapipe runs a whole
// workgroup on one thread (QUANTIZE_THREADS in operators/quantized/quantized.py).
@compute @workgroup_size(16)
fn main(wg: Grid) {
    let t = grid_group(wg) * 16u + wg.lid;
    if (t >= M() * NBLK()) {
        return;
    }
    let m = t / NBLK();
    let blk = t % NBLK();
    let k0 = blk * BLOCK();
    var peak = 0.0;
    for (var j = 0u; j < BLOCK(); j++) {
        peak = max(peak, abs(value(m, k0 + j)));
    }
    // 127 / max, not 1 / scale: onnxruntime's rounding (see quantize_q8.wgsl)
    let inverse = select(0.0, 127.0 / peak, peak != 0.0);
    var total = 0i;
    let base = t * (BLOCK() / 2u);
    for (var e = 0u; e < BLOCK() / 8u; e++) {
        for (var j = 0u; j < 4u; j++) {
            let lo = i32(round(value(m, k0 + 8u * e + j) * inverse));
            let hi = i32(round(value(m, k0 + 8u * e + j + 4u) * inverse));
            total += lo + hi;
            qa_store(base + 4u * e + j, bitcast<u32>(hi + 65536 * lo));
        }
    }
    sa_store(t, peak / 127.0);
    qsum_store(t, f32(total));
}
