// MatMulNBits (4-bit weights) for a CPU-type adapter: y[m, n] = sum_k a[m, k] * w[n, k] (+ bias)
// with w[n, k] = (q[n, k] - zero_point[n, blk]) * scale[n, blk]. No shared memory, no barriers:
// an invocation owns COLS = 8 columns (two groups of 4: n0.., n4..) and ROWS rows (wid.z: row
// block) and streams each column's packed row of B, its own contiguous run, 4 words (32
// weights) per vec4 load.
//
// Q8 (accuracy_level 4): the activation comes from quantize_q8_chunked.wgsl (or rmsnorm_q8.wgsl)
// as int8 values paired for 16-bit lanes (qa: for each 8 values a, 4 words a[j + 4] + 65536 a[j]),
// its per-block scales (sa) and sums (qsum). A weight word shifted by 4 j and masked to nibbles
// j and j + 4 times pair word j gives both products summed in its high half (pair_dot): 4
// integer multiplies for 8 weights, with no byte unpacking; per block y += (dot(q_w, q_a) -
// z * sum(q_a)) * sa * scale, the integer dot onnxruntime's CPU kernel takes, exactly.
// Without Q8 the activation stays f32 (a, read as vec4s) and each word's 8 nibbles become two
// vec4s of (q - z), dotted with a and scaled per block.
// Measured on lavapipe (2-core VM; raw-wgpu variants of the loop, then the kernel itself against
// its previous form in one process, 15 interleaved rounds): 8 columns per invocation beat 4 (one
// row ~10-30%, 4 rows ~6-11%); vec4 word loads beat single words by ~25%. The loads bound it:
// Mesa 22.3 loads storage one lane and one 32-bit component at a time (~10 cycles a word, a
// vec4 or scalars alike: loading 4 blocks' scales as one vec4 gained nothing), so the kernel
// costs about its loaded words. The paired products (instead of 2 dot4I8Packed a word, which
// lavapipe lowers to byte extracts) with the activation shared through subgroups run ~5-15%
// faster than that form (K x N = 512 x 1408, one row: 197 -> 181 us; 4096 x 1024: 1202 -> 1047;
// 14 rows, 512 x 1408: 1244 -> 1064), though the pairs double the activation's words.
// Texture reads were only ~15% faster than storage loads.
// Each invocation's loops run K / 32 + K / BLOCK times (the planner keeps K <= 32 * 16384).
//
// Buffers: Q8: qa (vec4<u32>: pair words), sa, qsum; else a (vec4); then b (raw, vec4 words),
// scales, [zp], [bias], y. Defs: Q8, ROWS (1 or 4), ZP_PACKED / ZP_FLOAT, HAS_BIAS;
// ONYXIA_SUBGROUPS (set at render).
// Params: M, N, BLOCK, NBLK, ROW_WORDS, ZP_ROW, RBLOCKS.
#import common::grid
#import quantized::nbits
#import quantized::epilogue

const COLS = 8u;
const ROWS = #{ROWS}u;
const THREADS = 8u;
const PAIRS = 0x000F000Fu;  // nibbles j and j + 4 of a word, shifted down by 4 j
#ifdef Q8
alias Dots = vec4<i32>;  // a block's dot products of 4 columns with one row
#else
alias Dots = vec4<f32>;
#endif

// Q8: a word group's 32 activation values as quantize_q8_chunked.wgsl pairs them: four
// vec4<i32>, one per weight word, lane j = a[j + 4] + 65536 * a[j] of that word's 8 values.
#ifdef Q8
struct Act {
    p0: vec4<i32>,
    p1: vec4<i32>,
    p2: vec4<i32>,
    p3: vec4<i32>,
}

fn act(qg: u32) -> Act {  // qg: vec4 index of the group's first pair word
    return Act(bitcast<vec4<i32>>(qa_load4(qg)), bitcast<vec4<i32>>(qa_load4(qg + 1u)),
               bitcast<vec4<i32>>(qa_load4(qg + 2u)), bitcast<vec4<i32>>(qa_load4(qg + 3u)));
}

#ifdef ONYXIA_SUBGROUPS
// Where the workgroup is one subgroup (lanes_share), lane l loads pair vec4 l & 3 of a row's
// group (lanes 0-3 one row, 4-7 another) and broadcasts hand each row's 4 to every lane: one
// load instead of 4 a row (lavapipe loads storage one lane at a time).
fn act_low(v: vec4<u32>) -> Act {  // the row lanes 0..3 loaded
    return Act(bitcast<vec4<i32>>(subgroupBroadcast(v, 0u)), bitcast<vec4<i32>>(subgroupBroadcast(v, 1u)),
               bitcast<vec4<i32>>(subgroupBroadcast(v, 2u)), bitcast<vec4<i32>>(subgroupBroadcast(v, 3u)));
}

fn act_high(v: vec4<u32>) -> Act {  // the row lanes 4..7 loaded
    return Act(bitcast<vec4<i32>>(subgroupBroadcast(v, 4u)), bitcast<vec4<i32>>(subgroupBroadcast(v, 5u)),
               bitcast<vec4<i32>>(subgroupBroadcast(v, 6u)), bitcast<vec4<i32>>(subgroupBroadcast(v, 7u)));
}
#endif

// One weight word's 8 nibbles times their activations, 2 per multiply: lane j holds nibbles j
// and j + 4 in its 16-bit halves (q[j] + 65536 q[j + 4]); times a[j + 4] + 65536 a[j] that is
// q[j] a[j + 4] + 65536 (q[j] a[j] + q[j + 4] a[j + 4]) modulo 2^32.
fn pair_dot(w: u32, p: vec4<i32>) -> i32 {
    let x = bitcast<vec4<i32>>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(PAIRS)) * p;
    return x.x + x.y + x.z + x.w;
}

// The high halves of two words' pair_dots: 8 pair sums, |sum| <= 8 * 2 * 15 * 127 < 2^15, over
// low halves |low| <= 8 * 15 * 127 < 2^15, so rounding off the low half is exact.
fn high(s: i32) -> i32 {
    return (s + 32768) >> 16u;
}

fn dot_group(w: vec4<u32>, a: Act) -> i32 {
    return high(pair_dot(w.x, a.p0) + pair_dot(w.y, a.p1)) + high(pair_dot(w.z, a.p2) + pair_dot(w.w, a.p3));
}

// The 4 columns' integer dots (zero point excluded) with one row's word group.
fn dots(w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, a: Act) -> vec4<i32> {
    return vec4<i32>(dot_group(w0, a), dot_group(w1, a), dot_group(w2, a), dot_group(w3, a));
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

struct Cols {  // an invocation's 8 columns (clamped to N - 1)
    c0: u32,
    n1: u32,
    n2: u32,
    n3: u32,
    n4: u32,
    n5: u32,
    n6: u32,
    n7: u32,
}

struct Rows {  // its rows (clamped to M - 1)
    r0: u32,
    r1: u32,
    r2: u32,
    r3: u32,
}

struct Accs {  // columns n0.. (a0..a3) and n4.. (a4..a7) of rows r0..r3
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    a4: vec4<f32>,
    a5: vec4<f32>,
    a6: vec4<f32>,
    a7: vec4<f32>,
}

// The whole walk over K. main calls it with a constant `share` in each branch of its test,
// so the compiler makes one copy per case and the loop carries no branch.
fn walk(share: bool, c: Cols, r: Rows, lane: u32, upper: bool) -> Accs {
    let c0 = c.c0;
    let n1 = c.n1;
    let n2 = c.n2;
    let n3 = c.n3;
    let n4 = c.n4;
    let n5 = c.n5;
    let n6 = c.n6;
    let n7 = c.n7;
    let r0 = r.r0;
#if ROWS == 4
    let r1 = r.r1;
    let r2 = r.r2;
    let r3 = r.r3;
#endif
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
    let groups = BLOCK() / 32u;  // vec4 word groups per block
    let row_groups = ROW_WORDS() / 4u;
#ifdef Q8
    let row_stride = NBLK() * BLOCK() / 8u;  // vec4s of qa per row (2 words a value)
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
        let z = vec4<f32>(zero_point(c0, blk), zero_point(n1, blk), zero_point(n2, blk), zero_point(n3, blk));
        let scale = vec4<f32>(f32(scales_load(c0 * NBLK() + blk)), f32(scales_load(n1 * NBLK() + blk)),
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
            let w0 = b_word4(c0 * row_groups + g);
            let w1 = b_word4(n1 * row_groups + g);
            let w2 = b_word4(n2 * row_groups + g);
            let w3 = b_word4(n3 * row_groups + g);
            let w4 = b_word4(n4 * row_groups + g);
            let w5 = b_word4(n5 * row_groups + g);
            let w6 = b_word4(n6 * row_groups + g);
            let w7 = b_word4(n7 * row_groups + g);
#ifdef Q8
            let at = 4u * g;  // the group's first pair vec4 in a row
            var x0: Act;
#if ROWS == 4
            var x1: Act;
            var x2: Act;
            var x3: Act;
#endif
            if (share) {
#ifdef ONYXIA_SUBGROUPS
#if ROWS == 4
                let va = qa_load4(select(r0, r1, upper) * row_stride + at + lane);
                let vb = qa_load4(select(r2, r3, upper) * row_stride + at + lane);
                x0 = act_low(va);
                x1 = act_high(va);
                x2 = act_low(vb);
                x3 = act_high(vb);
#else
                x0 = act_low(qa_load4(r0 * row_stride + at + lane));
#endif
#endif
            } else {
                x0 = act(r0 * row_stride + at);
#if ROWS == 4
                x1 = act(r1 * row_stride + at);
                x2 = act(r2 * row_stride + at);
                x3 = act(r3 * row_stride + at);
#endif
            }
            e0 += dots(w4, w5, w6, w7, x0);
            d0 += dots(w0, w1, w2, w3, x0);
#if ROWS == 4
            e1 += dots(w4, w5, w6, w7, x1);
            d1 += dots(w0, w1, w2, w3, x1);
            e2 += dots(w4, w5, w6, w7, x2);
            d2 += dots(w0, w1, w2, w3, x2);
            e3 += dots(w4, w5, w6, w7, x3);
            d3 += dots(w0, w1, w2, w3, x3);
#endif
#else
            e0 += dots(w4, w5, w6, w7, z4, r0 * row_stride + 8u * g);
            d0 += dots(w0, w1, w2, w3, z, r0 * row_stride + 8u * g);
#if ROWS == 4
            e1 += dots(w4, w5, w6, w7, z4, r1 * row_stride + 8u * g);
            d1 += dots(w0, w1, w2, w3, z, r1 * row_stride + 8u * g);
            e2 += dots(w4, w5, w6, w7, z4, r2 * row_stride + 8u * g);
            d2 += dots(w0, w1, w2, w3, z, r2 * row_stride + 8u * g);
            e3 += dots(w4, w5, w6, w7, z4, r3 * row_stride + 8u * g);
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
#if ROWS == 4
    return Accs(acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7);
#else
    return Accs(acc0, acc1, acc2, acc3, acc4, acc1, acc2, acc3);
#endif
}

@compute @workgroup_size(8)
fn main(wg: Grid
#ifdef ONYXIA_SUBGROUPS
        , @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_id: u32
#endif
        ) {
    var lanes_share = false;  // the workgroup is one subgroup: its lanes share the activation's loads
    var lane = 0u;
    var upper = false;
#ifdef ONYXIA_SUBGROUPS
    lanes_share = sg_size == THREADS;
    lane = sg_id & 3u;
    upper = sg_id >= 4u;
#endif
    let n0 = (grid_group(wg) * THREADS + wg.lid) * COLS;
    let m0 = wg.wid.z * ROWS;
    // A column past N reads the last one and never stores (no early return: the lanes stay
    // together for the broadcasts).
    let last_n = N() - 1u;
    let c0 = min(n0, last_n);
    let n1 = min(n0 + 1u, last_n);
    let n2 = min(n0 + 2u, last_n);
    let n3 = min(n0 + 3u, last_n);
    let n4 = min(n0 + 4u, last_n);
    let n5 = min(n0 + 5u, last_n);
    let n6 = min(n0 + 6u, last_n);
    let n7 = min(n0 + 7u, last_n);
    let last_m = M() - 1u;
    let r0 = min(m0, last_m);
#if ROWS == 4
    let r1 = min(m0 + 1u, last_m);
    let r2 = min(m0 + 2u, last_m);
    let r3 = min(m0 + 3u, last_m);
#endif
    let cols = Cols(c0, n1, n2, n3, n4, n5, n6, n7);
#if ROWS == 4
    let rows = Rows(r0, r1, r2, r3);
#else
    let rows = Rows(r0, r0, r0, r0);
#endif
    var out: Accs;
    if (lanes_share) {
        out = walk(true, cols, rows, lane, upper);
    } else {
        out = walk(false, cols, rows, lane, upper);
    }
    put(m0, n0, out.a0);
    put(m0, n0 + 4u, out.a4);
#if ROWS == 4
    put(m0 + 1u, n0, out.a1);
    put(m0 + 2u, n0, out.a2);
    put(m0 + 3u, n0, out.a3);
    put(m0 + 1u, n0 + 4u, out.a5);
    put(m0 + 2u, n0 + 4u, out.a6);
    put(m0 + 3u, n0 + 4u, out.a7);
#endif
}
