// MatMulNBits accuracy_level 4, step 1: the activation a [M, K] quantized to int8 per block of
// BLOCK values along K, as onnxruntime's CPU kernel does (MLAS CompInt8): per block,
// scale = max|a| / 127, q = round(a * (127 / max|a|)) (ties to even; 0 for an all-zero block), values past K
// are 0. Writes qa (int8, whole words: 4 per u32 word, low byte first), BLOCK / 4 words per block, and
// sa[m * NBLK + blk] = scale. One workgroup per (block, row); BLOCK <= 256 (threads stride over
// the block's words: at most one iteration each).
// Buffers: a (any float dtype: a float16 activation is read as the model holds it), qa, sa.
// Params: M, K, BLOCK, NBLK.

var<workgroup> peak: array<f32, 64>;

fn value(m: u32, k: u32) -> f32 {
    if (k < K()) {
        return f32(a_load(m * K() + k));
    }
    return 0.0;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let blk = wid.x;
    let m = wid.y;
    let k0 = blk * BLOCK();
    var local = 0.0;
    for (var w = lid; w < BLOCK() / 4u; w += 64u) {
        for (var j = 0u; j < 4u; j++) {
            local = max(local, abs(value(m, k0 + 4u * w + j)));
        }
    }
    peak[lid] = local;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            peak[lid] = max(peak[lid], peak[lid + stride]);
        }
        workgroupBarrier();
    }
    let scale = peak[0] / 127.0;
    // 127 / max, not 1 / scale: the two differ in the last bit, and onnxruntime uses this one
    // (measured: inputs with repeated values, as a 4-bit embedding gives, hit rounding ties).
    let inverse = select(0.0, 127.0 / peak[0], peak[0] != 0.0);
    for (var w = lid; w < BLOCK() / 4u; w += 64u) {
        var q: array<qa_t, qa_lanes>;  // qa is int8: 4 lanes to a word
        for (var j = 0u; j < 4u; j++) {
            q[j] = i32(round(value(m, k0 + 4u * w + j) * inverse));
        }
        qa_store_unit((m * NBLK() + blk) * (BLOCK() / 4u) + w, q);
    }
    if (lid == 0u) {
        sa_store(m * NBLK() + blk, scale);
    }
}
