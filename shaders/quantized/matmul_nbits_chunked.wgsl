// MatMulNBits (4-bit weights) for a CPU-type adapter: y[m, n] = sum_k a[m, k] * w[n, k] (+ bias)
// with w[n, k] = (q[n, k] - zero_point[n, blk]) * scale[n, blk]. No shared memory, no barriers:
// an invocation owns COLS = 8 columns (two groups of 4: n0.., n4..) and ROWS rows (wid.z: row
// block) and streams each column's packed row of B, its own contiguous run: PAIRED (block 32,
// an even block count) two blocks an iteration, each column's 8 words one b_word8 and its two
// scales one scales_load2; GROUP_PAIRS (block >= 64) two word groups of a block an iteration;
// else (an odd count of 32-blocks) one block, 4 words a b_word4.
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
// Mesa 22.3 loads storage one lane and one component at a time (~10 cycles a 32-bit word, a
// vec4 or scalars alike: loading 4 blocks' scales as one vec4 gained nothing), so the kernel
// costs about its loaded components. The paired products (instead of 2 dot4I8Packed a word, which
// lavapipe lowers to byte extracts) with the activation shared through subgroups run ~5-15%
// faster than that form (K x N = 512 x 1408, one row: 197 -> 181 us; 4096 x 1024: 1202 -> 1047;
// 14 rows, 512 x 1408: 1244 -> 1064), though the pairs double the activation's words.
// Texture reads were only ~15% faster than storage loads. What does pay is fewer load
// instructions: where the device has shader-int64 the pairs come as 64-bit loads (a vec4<u64>
// for 8 words, a u64 for 2 scales; codegen/storage.py, wide_reads), which lavapipe loads per
// lane and component as it does 32-bit ones. Against the one-block-a-vec4<u32> form, same
// process, 11 interleaved rounds (us): 512 x 1408 one row 295 -> 201, 1408 x 512 214 -> 162,
// 512 x 8000 1284 -> 956, 14 rows 512 x 1408 2078 -> 1276, 1408 x 512 1033 -> 599.
// Each invocation's loops run at most K / 32 + K / BLOCK times (the planner keeps K <= 32 * 16384).
//
// Buffers: Q8: qa (vec4<u32>: pair words), sa, qsum; else a (vec4); then b (raw, vec4 words),
// scales, [zp], [bias], y. Defs: Q8, ROWS (1 or 4), PAIRED / GROUP_PAIRS, TILED (with PAIRED: b
// and scales in tiles, one contiguous run a workgroup's iteration; quantized::nbits_index),
// ZP_PACKED / ZP_FLOAT, HAS_BIAS; ONYXIA_SUBGROUPS (set at render).
// Params: M, N, BLOCK, NBLK, ROW_WORDS, ZP_ROW, RBLOCKS.
#import common::grid
#import quantized::nbits
#import quantized::nbits_index
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

struct Ws {  // one word group (32 values of K) of the 8 columns, as vec4 words
    w0: vec4<u32>,
    w1: vec4<u32>,
    w2: vec4<u32>,
    w3: vec4<u32>,
    w4: vec4<u32>,
    w5: vec4<u32>,
    w6: vec4<u32>,
    w7: vec4<u32>,
}

struct Ds {  // the dots of columns n0.. (d0..d3) and n4.. (e0..e3) with rows r0..r3
    d0: Dots,
    d1: Dots,
    d2: Dots,
    d3: Dots,
    e0: Dots,
    e1: Dots,
    e2: Dots,
    e3: Dots,
}

fn add(a: Ds, b: Ds) -> Ds {
    return Ds(a.d0 + b.d0, a.d1 + b.d1, a.d2 + b.d2, a.d3 + b.d3, a.e0 + b.e0, a.e1 + b.e1, a.e2 + b.e2, a.e3 + b.e3);
}

// Word group g of the invocation's columns dotted with its rows' activations (z, z4: the
// columns' zero points, which only the f32 form subtracts here).
fn group_dots(w: Ws, g: u32, share: bool, r: Rows, lane: u32, upper: bool, z: vec4<f32>, z4: vec4<f32>) -> Ds {
    var o = Ds();
#ifdef Q8
    let row_stride = NBLK() * BLOCK() / 8u;  // vec4s of qa per row (2 words a value)
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
        let va = qa_load4(select(r.r0, r.r1, upper) * row_stride + at + lane);
        let vb = qa_load4(select(r.r2, r.r3, upper) * row_stride + at + lane);
        x0 = act_low(va);
        x1 = act_high(va);
        x2 = act_low(vb);
        x3 = act_high(vb);
#else
        x0 = act_low(qa_load4(r.r0 * row_stride + at + lane));
#endif
#endif
    } else {
        x0 = act(r.r0 * row_stride + at);
#if ROWS == 4
        x1 = act(r.r1 * row_stride + at);
        x2 = act(r.r2 * row_stride + at);
        x3 = act(r.r3 * row_stride + at);
#endif
    }
    o.e0 = dots(w.w4, w.w5, w.w6, w.w7, x0);
    o.d0 = dots(w.w0, w.w1, w.w2, w.w3, x0);
#if ROWS == 4
    o.e1 = dots(w.w4, w.w5, w.w6, w.w7, x1);
    o.d1 = dots(w.w0, w.w1, w.w2, w.w3, x1);
    o.e2 = dots(w.w4, w.w5, w.w6, w.w7, x2);
    o.d2 = dots(w.w0, w.w1, w.w2, w.w3, x2);
    o.e3 = dots(w.w4, w.w5, w.w6, w.w7, x3);
    o.d3 = dots(w.w0, w.w1, w.w2, w.w3, x3);
#endif
#else
    let row_stride = NBLK() * BLOCK() / 4u;  // vec4s of a per row (K is whole blocks)
    o.e0 = dots(w.w4, w.w5, w.w6, w.w7, z4, r.r0 * row_stride + 8u * g);
    o.d0 = dots(w.w0, w.w1, w.w2, w.w3, z, r.r0 * row_stride + 8u * g);
#if ROWS == 4
    o.e1 = dots(w.w4, w.w5, w.w6, w.w7, z4, r.r1 * row_stride + 8u * g);
    o.d1 = dots(w.w0, w.w1, w.w2, w.w3, z, r.r1 * row_stride + 8u * g);
    o.e2 = dots(w.w4, w.w5, w.w6, w.w7, z4, r.r2 * row_stride + 8u * g);
    o.d2 = dots(w.w0, w.w1, w.w2, w.w3, z, r.r2 * row_stride + 8u * g);
    o.e3 = dots(w.w4, w.w5, w.w6, w.w7, z4, r.r3 * row_stride + 8u * g);
    o.d3 = dots(w.w0, w.w1, w.w2, w.w3, z, r.r3 * row_stride + 8u * g);
#endif
#endif
    return o;
}

// The accumulators after block blk, whose dots are d (scale, scale4: the columns' scales).
fn finish(acc: Accs, d: Ds, z: vec4<f32>, scale: vec4<f32>, z4: vec4<f32>, scale4: vec4<f32>, r: Rows,
          blk: u32) -> Accs {
    var o = acc;
    o.a0 = finish_block(acc.a0, d.d0, z, scale, r.r0, blk);
    o.a4 = finish_block(acc.a4, d.e0, z4, scale4, r.r0, blk);
#if ROWS == 4
    o.a1 = finish_block(acc.a1, d.d1, z, scale, r.r1, blk);
    o.a2 = finish_block(acc.a2, d.d2, z, scale, r.r2, blk);
    o.a3 = finish_block(acc.a3, d.d3, z, scale, r.r3, blk);
    o.a5 = finish_block(acc.a5, d.e1, z4, scale4, r.r1, blk);
    o.a6 = finish_block(acc.a6, d.e2, z4, scale4, r.r2, blk);
    o.a7 = finish_block(acc.a7, d.e3, z4, scale4, r.r3, blk);
#endif
    return o;
}

fn zeros(c: Cols, blk: u32) -> vec4<f32> {  // zero points of columns n0..n3
    return vec4<f32>(zero_point(c.c0, blk), zero_point(c.n1, blk), zero_point(c.n2, blk), zero_point(c.n3, blk));
}

fn zeros4(c: Cols, blk: u32) -> vec4<f32> {  // of columns n4..n7
    return vec4<f32>(zero_point(c.n4, blk), zero_point(c.n5, blk), zero_point(c.n6, blk), zero_point(c.n7, blk));
}

// The whole walk over K. main calls it with a constant `share` in each branch of its test,
// so the compiler makes one copy per case and the loop carries no branch.
// PAIRED (BLOCK 32, NBLK even): two blocks an iteration, each column's 8 words one b_word8
// and its two scales one scales_load2 (a vec4<u64> and a u64 where the device has 64-bit
// loads; pair_index finds them in tiles with TILED). GROUP_PAIRS (BLOCK >= 64): two word
// groups of a block an iteration, one b_word8.
fn walk(share: bool, c: Cols, r: Rows, lane: u32, upper: bool) -> Accs {
    var acc = Accs();
    var d: Ds;
    let row_groups = ROW_WORDS() / 4u;  // vec4 word groups per column
#ifdef PAIRED
    for (var bp = 0u; bp < NBLK() / 2u; bp++) {
        let blk = 2u * bp;
        let x0 = b_word8(pair_index(c.c0, bp));
        let x1 = b_word8(pair_index(c.n1, bp));
        let x2 = b_word8(pair_index(c.n2, bp));
        let x3 = b_word8(pair_index(c.n3, bp));
        let x4 = b_word8(pair_index(c.n4, bp));
        let x5 = b_word8(pair_index(c.n5, bp));
        let x6 = b_word8(pair_index(c.n6, bp));
        let x7 = b_word8(pair_index(c.n7, bp));
        let s0 = scales_load2(pair_index(c.c0, bp));
        let s1 = scales_load2(pair_index(c.n1, bp));
        let s2 = scales_load2(pair_index(c.n2, bp));
        let s3 = scales_load2(pair_index(c.n3, bp));
        let s4 = scales_load2(pair_index(c.n4, bp));
        let s5 = scales_load2(pair_index(c.n5, bp));
        let s6 = scales_load2(pair_index(c.n6, bp));
        let s7 = scales_load2(pair_index(c.n7, bp));
        let za = zeros(c, blk);
        let z4a = zeros4(c, blk);
        d = group_dots(Ws(x0[0], x1[0], x2[0], x3[0], x4[0], x5[0], x6[0], x7[0]), blk, share, r, lane, upper, za, z4a);
        acc = finish(acc, d, za, vec4<f32>(s0.x, s1.x, s2.x, s3.x), z4a, vec4<f32>(s4.x, s5.x, s6.x, s7.x), r, blk);
        let zb = zeros(c, blk + 1u);
        let z4b = zeros4(c, blk + 1u);
        d = group_dots(Ws(x0[1], x1[1], x2[1], x3[1], x4[1], x5[1], x6[1], x7[1]), blk + 1u, share, r, lane, upper,
                       zb, z4b);
        acc = finish(acc, d, zb, vec4<f32>(s0.y, s1.y, s2.y, s3.y), z4b, vec4<f32>(s4.y, s5.y, s6.y, s7.y), r,
                     blk + 1u);
    }
#else
    let groups = BLOCK() / 32u;  // vec4 word groups per block
    for (var blk = 0u; blk < NBLK(); blk++) {
        let z = zeros(c, blk);
        let z4 = zeros4(c, blk);
        let scale = vec4<f32>(f32(scales_load(c.c0 * NBLK() + blk)), f32(scales_load(c.n1 * NBLK() + blk)),
                              f32(scales_load(c.n2 * NBLK() + blk)), f32(scales_load(c.n3 * NBLK() + blk)));
        let scale4 = vec4<f32>(f32(scales_load(c.n4 * NBLK() + blk)), f32(scales_load(c.n5 * NBLK() + blk)),
                               f32(scales_load(c.n6 * NBLK() + blk)), f32(scales_load(c.n7 * NBLK() + blk)));
        d = Ds();  // zeroed each block (naga zeroes a loop body's `var` only once)
#ifdef GROUP_PAIRS
        let half = row_groups / 2u;
        for (var j = 0u; j < groups; j += 2u) {  // a constant trip count: unrolled
            let g = blk * groups + j;
            let h = g / 2u;
            let x0 = b_word8(c.c0 * half + h);
            let x1 = b_word8(c.n1 * half + h);
            let x2 = b_word8(c.n2 * half + h);
            let x3 = b_word8(c.n3 * half + h);
            let x4 = b_word8(c.n4 * half + h);
            let x5 = b_word8(c.n5 * half + h);
            let x6 = b_word8(c.n6 * half + h);
            let x7 = b_word8(c.n7 * half + h);
            d = add(d, group_dots(Ws(x0[0], x1[0], x2[0], x3[0], x4[0], x5[0], x6[0], x7[0]), g, share, r, lane, upper,
                                  z, z4));
            d = add(d, group_dots(Ws(x0[1], x1[1], x2[1], x3[1], x4[1], x5[1], x6[1], x7[1]), g + 1u, share, r, lane,
                                  upper, z, z4));
        }
#else
        for (var j = 0u; j < groups; j++) {  // a constant trip count: unrolled for the usual block of 32
            let g = blk * groups + j;
            let w = Ws(b_word4(c.c0 * row_groups + g), b_word4(c.n1 * row_groups + g), b_word4(c.n2 * row_groups + g),
                       b_word4(c.n3 * row_groups + g), b_word4(c.n4 * row_groups + g), b_word4(c.n5 * row_groups + g),
                       b_word4(c.n6 * row_groups + g), b_word4(c.n7 * row_groups + g));
            d = add(d, group_dots(w, g, share, r, lane, upper, z, z4));
        }
#endif
        acc = finish(acc, d, z, scale, z4, scale4, r, blk);
    }
#endif
    return acc;
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
