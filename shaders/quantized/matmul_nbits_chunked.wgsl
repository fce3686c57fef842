// MatMulNBits (4-bit weights) for a CPU-type adapter: y[m, n] = sum_k a[m, k] * w[n, k] (+ bias)
// with w[n, k] = (q[n, k] - zero_point[n, blk]) * scale[n, blk]. No shared memory, no barriers:
// an invocation owns COLS = 4 columns and ROWS rows (wid.z: row block) and streams each column's
// packed row of B, its own contiguous run, 4 words (32 weights) per vec4 load.
//
// Q8 (accuracy_level 4): the activation comes from quantize_q8_chunked.wgsl as int8 bytes
// paired with the nibbles (qa), its per-block scales (sa) and sums (qsum); a weight word masked
// to its low / high nibbles (0..15, valid int8 bytes) takes two dot4I8Packed with those, and per
// block y += (dot(q_w, q_a) - z * sum(q_a)) * sa * scale: the integer dot onnxruntime's CPU
// kernel takes, in i32. Without Q8 the activation stays f32 (a, read as vec4s) and each word's
// 8 nibbles become two vec4s of (q - z), dotted with a and scaled per block.
// Measured on lavapipe (K = 512, N = 1408, M = 1): ~8 G int8 ops/s per core with 4 columns per
// invocation, 3x the coalesced kernel; vec4 word loads beat single words by ~25%.
// Each invocation's loops run K / 32 + K / BLOCK times (the planner keeps K <= 32 * 16384).
//
// Buffers: Q8: qa (vec4<u32>), sa, qsum; else a (vec4); then b (raw, vec4 words), scales, [zp],
// [bias], y. Defs: Q8 (+ PLAIN_DOT: byte products), ROWS (1 or 4), ZP_PACKED / ZP_FLOAT, HAS_BIAS.
// Params: M, N, BLOCK, NBLK, ROW_WORDS, ZP_ROW, RBLOCKS.
#import common::grid
#import quantized::nbits

const COLS = 4u;
const ROWS = #{ROWS}u;
const THREADS = 8u;
const LOW = 0x0F0F0F0Fu;

// The block's dot product of column word group `w` with row m's activations at word group g
// (32 values), in the block's integer (Q8) or float units, zero point excluded (Q8) or applied.
#ifdef Q8
fn dot4(x: u32, y: u32) -> i32 {
#ifdef PLAIN_DOT
    var sum = 0;
    for (var j = 0u; j < 4u; j++) {
        // sign-extend byte j of each word
        sum += (bitcast<i32>(x << (24u - 8u * j)) >> 24u) * (bitcast<i32>(y << (24u - 8u * j)) >> 24u);
    }
    return sum;
#else
    return dot4I8Packed(x, y);
#endif
}

fn dot_group(w: vec4<u32>, m: u32, g: u32) -> i32 {
    let q0 = qa_load4(2u * g + m * 2u * NBLK() * BLOCK() / 32u);
    let q1 = qa_load4(2u * g + 1u + m * 2u * NBLK() * BLOCK() / 32u);
    return dot4(w.x & LOW, q0.x) + dot4((w.x >> 4u) & LOW, q0.y) + dot4(w.y & LOW, q0.z) + dot4((w.y >> 4u) & LOW, q0.w)
         + dot4(w.z & LOW, q1.x) + dot4((w.z >> 4u) & LOW, q1.y) + dot4(w.w & LOW, q1.z) + dot4((w.w >> 4u) & LOW, q1.w);
}
#else
fn nibbles(word: u32, z: f32) -> mat2x4<f32> {
    let v = vec4<u32>(word);
    return mat2x4<f32>(vec4<f32>((v >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u)) - z,
                       vec4<f32>((v >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u)) - z);
}

fn dot_word(word: u32, z: f32, row: u32, j: u32) -> f32 {
    let q = nibbles(word, z);
    return dot(q[0], a_load4(row + 2u * j)) + dot(q[1], a_load4(row + 2u * j + 1u));
}

fn dot_group(w: vec4<u32>, z: f32, m: u32, g: u32) -> f32 {
    let row = m * (NBLK() * BLOCK() / 4u) + 8u * g;  // vec4 index of a[m, 32 g] (K padded to blocks)
    return dot_word(w.x, z, row, 0u) + dot_word(w.y, z, row, 1u) + dot_word(w.z, z, row, 2u)
         + dot_word(w.w, z, row, 3u);
}
#endif

fn put(m: u32, n: u32, v: f32) {
    if (m < M() && n < N()) {
        var out = v;
#ifdef HAS_BIAS
        out += f32(bias_load(n));
#endif
        y_store(m * N() + n, y_t(out));
    }
}

@compute @workgroup_size(8)
fn main(wg: Grid) {
    let n0 = (grid_group(wg) * THREADS + wg.lid) * COLS;
    if (n0 >= N()) {
        return;
    }
    let m0 = wg.wid.z * ROWS;
    var cols: array<u32, 4>;  // a column past N reads the last one and never stores
    for (var c = 0u; c < COLS; c++) {
        cols[c] = min(n0 + c, N() - 1u);
    }
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(m0 + r, M() - 1u);
    }
    var acc: array<array<f32, ROWS>, 4>;
    let groups = BLOCK() / 32u;  // vec4 word groups per block
    let row_groups = ROW_WORDS() / 4u;
    for (var blk = 0u; blk < NBLK(); blk++) {
        for (var c = 0u; c < COLS; c++) {
            let n = cols[c];
            let z = zero_point(n, blk);
            let scale = f32(scales_load(n * NBLK() + blk));
#ifdef Q8
            var idot: array<i32, ROWS>;
            for (var r = 0u; r < ROWS; r++) {  // naga zeroes a loop body's `var` once, not per iteration
                idot[r] = 0i;
            }
            for (var g = 0u; g < groups; g++) {
                let w = b_word4(n * row_groups + blk * groups + g);
                for (var r = 0u; r < ROWS; r++) {
                    idot[r] += dot_group(w, rows[r], blk * groups + g);
                }
            }
            for (var r = 0u; r < ROWS; r++) {
                let at = rows[r] * NBLK() + blk;
                acc[c][r] += (f32(idot[r]) - z * qsum_load(at)) * (sa_load(at) * scale);
            }
#else
            var fdot: array<f32, ROWS>;
            for (var r = 0u; r < ROWS; r++) {  // naga zeroes a loop body's `var` once, not per iteration
                fdot[r] = 0.0;
            }
            for (var g = 0u; g < groups; g++) {
                let w = b_word4(n * row_groups + blk * groups + g);
                for (var r = 0u; r < ROWS; r++) {
                    fdot[r] += dot_group(w, z, rows[r], blk * groups + g);
                }
            }
            for (var r = 0u; r < ROWS; r++) {
                acc[c][r] += fdot[r] * scale;
            }
#endif
        }
    }
    for (var c = 0u; c < COLS; c++) {
        for (var r = 0u; r < ROWS; r++) {
            put(m0 + r, n0 + c, acc[c][r]);
        }
    }
}
