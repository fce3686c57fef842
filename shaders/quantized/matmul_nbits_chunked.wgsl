// MatMulNBits (4-bit weights) for a CPU-type adapter: y[m, n] = sum_k a[m, k] * w[n, k] (+ bias)
// with w[n, k] = (q[n, k] - zero_point[n, blk]) * scale[n, blk]. No shared memory, no barriers:
// an invocation owns COLS = 8 columns (two groups of 4: n0.., n4..) and ROWS rows (wid.z: row
// block) and streams each column's packed row of B, its own contiguous run, 4 words (32
// weights) per vec4 load.
//
// Q8 (accuracy_level 4): the activation comes from quantize_q8_chunked.wgsl as int8 bytes
// paired with the nibbles (qa), its per-block scales (sa) and sums (qsum); a weight word masked
// to its low / high nibbles (0..15, valid int8 bytes) takes two dot4I8Packed with those, and per
// block y += (dot(q_w, q_a) - z * sum(q_a)) * sa * scale: the integer dot onnxruntime's CPU
// kernel takes, in i32. Without Q8 the activation stays f32 (a, read as vec4s) and each word's
// 8 nibbles become two vec4s of (q - z), dotted with a and scaled per block.
// Measured on lavapipe (K = 512, N = 1408, M = 1): ~8 G int8 ops/s per core with 4 columns per
// invocation, 3x the coalesced kernel; vec4 word loads beat single words by ~25%. 8 columns
// per invocation instead of 4: one row ~10-30% faster at K = 512 and 1408 on lavapipe (2-core
// VM, median of 15; llama30m int4 decode ~6-10%), 4 rows ~6-11% (its prefill of 14 and 64
// tokens, 6 interleaved runs).
// Where the time goes there (K = N = 1408, one row, raw-wgpu variants of this loop): ~58% the
// weights' loads (Mesa 22.3 loads storage one lane and one 32-bit component at a time, ~2 ns
// each), ~30% the arithmetic (without any load: 270 of ~920 us); int4 weights already pack the
// most weights per loaded word. Reading them through a texture_2d<u32> was only ~15% faster.
// Each invocation's loops run K / 32 + K / BLOCK times (the planner keeps K <= 32 * 16384).
//
// Buffers: Q8: qa (vec4<u32>), sa, qsum; else a (vec4); then b (raw, vec4 words), scales, [zp],
// [bias], y. Defs: Q8 (+ PLAIN_DOT: byte products), ROWS (1 or 4), ZP_PACKED / ZP_FLOAT, HAS_BIAS.
// Params: M, N, BLOCK, NBLK, ROW_WORDS, ZP_ROW, RBLOCKS.
#import common::grid
#import quantized::nbits
#import quantized::epilogue

const COLS = 8u;
const ROWS = #{ROWS}u;
const THREADS = 8u;
const LOW = 0x0F0F0F0Fu;
#ifdef Q8
alias Dots = vec4<i32>;  // a block's dot products of 4 columns with one row
#else
alias Dots = vec4<f32>;
#endif

// Q8: one word group (32 weights of a column) dotted with the matching 32 activation bytes
// (qa words 2g, 2g + 1 of the row: q0, q1), zero point excluded.
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

fn dot_group(w: vec4<u32>, q0: vec4<u32>, q1: vec4<u32>) -> i32 {
    return dot4(w.x & LOW, q0.x) + dot4((w.x >> 4u) & LOW, q0.y) + dot4(w.y & LOW, q0.z) + dot4((w.y >> 4u) & LOW, q0.w)
         + dot4(w.z & LOW, q1.x) + dot4((w.z >> 4u) & LOW, q1.y) + dot4(w.w & LOW, q1.z) + dot4((w.w >> 4u) & LOW, q1.w);
}

// The 4 columns' integer dots with row m's group g (vec4 index of its first qa word pair: qg).
fn dots(w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, qg: u32) -> vec4<i32> {
    let q0 = qa_load4(qg);
    let q1 = qa_load4(qg + 1u);
    return vec4<i32>(dot_group(w0, q0, q1), dot_group(w1, q0, q1), dot_group(w2, q0, q1), dot_group(w3, q0, q1));
}
#else
// f32 activations: 32 weights minus the zero point, dotted with a's 8 vec4s from index ag.
fn nibbles(word: u32, z: f32) -> mat2x4<f32> {
    let v = vec4<u32>(word);
    return mat2x4<f32>(vec4<f32>((v >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u)) - z,
                       vec4<f32>((v >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u)) - z);
}

fn dot_group(w: vec4<u32>, z: f32, ag: u32) -> f32 {
    let q0 = nibbles(w.x, z);
    let q1 = nibbles(w.y, z);
    let q2 = nibbles(w.z, z);
    let q3 = nibbles(w.w, z);
    return dot(q0[0], a_load4(ag)) + dot(q0[1], a_load4(ag + 1u)) + dot(q1[0], a_load4(ag + 2u))
         + dot(q1[1], a_load4(ag + 3u)) + dot(q2[0], a_load4(ag + 4u)) + dot(q2[1], a_load4(ag + 5u))
         + dot(q3[0], a_load4(ag + 6u)) + dot(q3[1], a_load4(ag + 7u));
}

fn dots(w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, z: vec4<f32>, ag: u32) -> vec4<f32> {
    return vec4<f32>(dot_group(w0, z.x, ag), dot_group(w1, z.y, ag), dot_group(w2, z.z, ag), dot_group(w3, z.w, ag));
}
#endif

fn put(m: u32, n0: u32, v: vec4<f32>) {  // the 4 columns from n0
    if (m >= M()) {
        return;
    }
    for (var c = 0u; c < 4u; c++) {
        let n = n0 + c;
        if (n < N()) {
            var out = v[c];
            out = nbits_epilogue(out, m, n);
            y_store(m * N() + n, y_t(out));
        }
    }
}

// Row m's accumulator after one block: integer dots (Q8) or float ones, scaled.
#ifdef Q8
fn finish_block(acc: vec4<f32>, d: vec4<i32>, z: vec4<f32>, scale: vec4<f32>, m: u32, blk: u32) -> vec4<f32> {
    let at = m * NBLK() + blk;
    return acc + (vec4<f32>(d) - z * qsum_load(at)) * (sa_load(at) * scale);
}
#else
fn finish_block(acc: vec4<f32>, d: vec4<f32>, z: vec4<f32>, scale: vec4<f32>, m: u32, blk: u32) -> vec4<f32> {
    return acc + d * scale;
}
#endif

@compute @workgroup_size(8)
fn main(wg: Grid) {
    let n0 = (grid_group(wg) * THREADS + wg.lid) * COLS;
    if (n0 >= N()) {
        return;
    }
    let m0 = wg.wid.z * ROWS;
    let last_n = N() - 1u;  // a column past N reads the last one and never stores
    let n1 = min(n0 + 1u, last_n);
    let n2 = min(n0 + 2u, last_n);
    let n3 = min(n0 + 3u, last_n);
    let n4 = min(n0 + 4u, last_n);
    let n5 = min(n0 + 5u, last_n);
    let n6 = min(n0 + 6u, last_n);
    let n7 = min(n0 + 7u, last_n);
    var e0: Dots;
    var acc4 = vec4<f32>();
#if ROWS == 4
    var e1: Dots;
    var e2: Dots;
    var e3: Dots;
    var acc5 = vec4<f32>();
    var acc6 = vec4<f32>();
    var acc7 = vec4<f32>();
#endif
    let last_m = M() - 1u;
    let r0 = min(m0, last_m);
#if ROWS == 4
    let r1 = min(m0 + 1u, last_m);
    let r2 = min(m0 + 2u, last_m);
    let r3 = min(m0 + 3u, last_m);
#endif
    let groups = BLOCK() / 32u;  // vec4 word groups per block
    let row_groups = ROW_WORDS() / 4u;
#ifdef Q8
    let row_stride = NBLK() * BLOCK() / 16u;  // vec4s of qa per row
#else
    let row_stride = NBLK() * BLOCK() / 4u;  // vec4s of a per row (K is whole blocks)
#endif
    var d0: Dots;
    var d1: Dots;
    var d2: Dots;
    var d3: Dots;
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var blk = 0u; blk < NBLK(); blk++) {
        let z = vec4<f32>(zero_point(n0, blk), zero_point(n1, blk), zero_point(n2, blk), zero_point(n3, blk));
        let scale = vec4<f32>(f32(scales_load(n0 * NBLK() + blk)), f32(scales_load(n1 * NBLK() + blk)),
                              f32(scales_load(n2 * NBLK() + blk)), f32(scales_load(n3 * NBLK() + blk)));
        d0 = Dots();  // zeroed each block (naga zeroes a loop body's `var` only once)
        d1 = Dots();
        d2 = Dots();
        d3 = Dots();
        let z4 = vec4<f32>(zero_point(n4, blk), zero_point(n5, blk), zero_point(n6, blk), zero_point(n7, blk));
        let scale4 = vec4<f32>(f32(scales_load(n4 * NBLK() + blk)), f32(scales_load(n5 * NBLK() + blk)),
                               f32(scales_load(n6 * NBLK() + blk)), f32(scales_load(n7 * NBLK() + blk)));
        e0 = Dots();
#if ROWS == 4
        e1 = Dots();
        e2 = Dots();
        e3 = Dots();
#endif
        for (var j = 0u; j < groups; j++) {  // a constant trip count: unrolled for the usual block of 32
            let g = blk * groups + j;
            let w0 = b_word4(n0 * row_groups + g);
            let w1 = b_word4(n1 * row_groups + g);
            let w2 = b_word4(n2 * row_groups + g);
            let w3 = b_word4(n3 * row_groups + g);
            let w4 = b_word4(n4 * row_groups + g);
            let w5 = b_word4(n5 * row_groups + g);
            let w6 = b_word4(n6 * row_groups + g);
            let w7 = b_word4(n7 * row_groups + g);
#ifdef Q8
            e0 += dots(w4, w5, w6, w7, r0 * row_stride + 2u * g);
#if ROWS == 4
            e1 += dots(w4, w5, w6, w7, r1 * row_stride + 2u * g);
            e2 += dots(w4, w5, w6, w7, r2 * row_stride + 2u * g);
            e3 += dots(w4, w5, w6, w7, r3 * row_stride + 2u * g);
#endif
#else
            e0 += dots(w4, w5, w6, w7, z4, r0 * row_stride + 8u * g);
#if ROWS == 4
            e1 += dots(w4, w5, w6, w7, z4, r1 * row_stride + 8u * g);
            e2 += dots(w4, w5, w6, w7, z4, r2 * row_stride + 8u * g);
            e3 += dots(w4, w5, w6, w7, z4, r3 * row_stride + 8u * g);
#endif
#endif
#ifdef Q8
            d0 += dots(w0, w1, w2, w3, r0 * row_stride + 2u * g);
#if ROWS == 4
            d1 += dots(w0, w1, w2, w3, r1 * row_stride + 2u * g);
            d2 += dots(w0, w1, w2, w3, r2 * row_stride + 2u * g);
            d3 += dots(w0, w1, w2, w3, r3 * row_stride + 2u * g);
#endif
#else
            d0 += dots(w0, w1, w2, w3, z, r0 * row_stride + 8u * g);
#if ROWS == 4
            d1 += dots(w0, w1, w2, w3, z, r1 * row_stride + 8u * g);
            d2 += dots(w0, w1, w2, w3, z, r2 * row_stride + 8u * g);
            d3 += dots(w0, w1, w2, w3, z, r3 * row_stride + 8u * g);
#endif
#endif
        }
        acc0 = finish_block(acc0, d0, z, scale, r0, blk);
        acc4 = finish_block(acc4, e0, z4, scale4, r0, blk);
#if ROWS == 4
        acc5 = finish_block(acc5, e1, z4, scale4, r1, blk);
        acc6 = finish_block(acc6, e2, z4, scale4, r2, blk);
        acc7 = finish_block(acc7, e3, z4, scale4, r3, blk);
#endif
#if ROWS == 4
        acc1 = finish_block(acc1, d1, z, scale, r1, blk);
        acc2 = finish_block(acc2, d2, z, scale, r2, blk);
        acc3 = finish_block(acc3, d3, z, scale, r3, blk);
#endif
    }
    put(m0, n0, acc0);
    put(m0, n0 + 4u, acc4);
#if ROWS == 4
    put(m0 + 1u, n0, acc1);
    put(m0 + 2u, n0, acc2);
    put(m0 + 3u, n0, acc3);
    put(m0 + 1u, n0 + 4u, acc5);
    put(m0 + 2u, n0 + 4u, acc6);
    put(m0 + 3u, n0 + 4u, acc7);
#endif
}
