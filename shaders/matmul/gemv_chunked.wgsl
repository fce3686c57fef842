// Matrix product for few rows (decode M = 1, prefills up to 64 rows), the pattern a CPU-type
// adapter (lavapipe) runs fastest: no shared memory, no barriers, and each invocation streams
// its own contiguous run of memory with vec4 loads.
//
// An invocation owns one vec4 group of output columns and ROWS rows of A (wid.z = (batch *
// RBLOCKS + row block) * SPLITS + split), and walks its K chunk 4 rows of B at a time: the 4 x 4
// block of B under its column group is a mat4x4 (columns = k), so one matrix product per 4 k
// accumulates a vec4 of columns for a row (ROWS = 1) or a mat4x4 of 4 rows x 4 columns per 4
// rows (ROWS = 4, 8, 16, 32; named accumulators: an array-indexed one spills and runs 4x slower).
// A's values are the same for the 8 invocations of a workgroup: where the adapter has subgroups
// of exactly the workgroup (ONYXIA_SUBGROUPS, a render-time def, and subgroup_size 8 at run
// time), invocation l loads rows m0 + l, m0 + 8 + l, .. and subgroupBroadcast hands each row to
// all, instead of every invocation loading every row (lavapipe loads storage one invocation at
// a time); where the subgroups are known to hold the 8 lanes (ONYXIA_SUBGROUPS_OF_8) the plain
// path is not compiled at all. Measured on lavapipe (Mesa 22.3, K = 512, N = 1024 .. 1408): 14 rows ~13 -> ~23 GF/s,
// 64 rows (ROWS = 32) ~16 -> ~35 GF/s; one row streams B ~1.2 - 1.8x faster with one column
// group per invocation than with two.
// A row past M reads row M - 1 and a column group past N / 4 reads the last one; neither stores.
// Each invocation's loop runs KCHUNK / 4 times (KCHUNK <= 16384 by construction: lavapipe stops
// an invocation's loops after ~65k iterations); a longer K is split (SPLIT: partial sums to
// `partial` [SPLITS, P], P = batch * M * N, added by splitk.wgsl).
//
// Buffers: a, b (both read as vec4: K % 4 == 0, N % 4 == 0), [c], [e0, e1, ...], y (or partial with SPLIT,
// written as vec4s).
// With TRANS_A, A [K, M] holds 4 rows side by side at each k: where the lanes share a subgroup
// (A_QUADS), lane l loads rows m0 + 4 * (l / 4) .. + 3 at k = 4 * k4 + l % 4 and the broadcasts
// hand each 4 x 4 block round transposed: where M % 4 == 0 one vec4 load a lane per 8 rows and 4
// k instead of four scalar loads a row (lavapipe, Mesa 25, M 196, K 112, N 672: 1.57 -> 1.40 ms),
// else four scalar loads as before.
// With C_ROW (Gemm's C one row: C_MS = 0, C_NS = 1, a linear layer's bias; not with A_QUADS,
// operators/matmul/gemv.py rows_defs) an invocation loads its 4 columns' C once, not once an
// output (the same loads ROWS times over: 0.16 ms of a 1.72 ms product).
// With A_SCALE, A's column k (its values at k) is multiplied by ascale[batch * ASCALE_BS + k]: a
// squeeze-excite gate over a pointwise conv's input channels (operators/conv/scale.py), applied
// to B's block instead (its column j is k = 4 * k4 + j): one vec4 load and four products per 4 k,
// whatever ROWS, where a dispatch of its own read and wrote the whole input.
// With A_WINDOW (TRANS_A), A's rows are a strided 1x1 conv's output positions read where they
// lie in its input [C, *spatial] (operators/conv/pointwise.py plan_window_product): row m at
// (m / A_OW) * A_ROWSTEP + (m % A_OW) * A_COLSTEP, one k A_PLANE on (a_row, a_plane); a lane's
// 4 rows' offsets are worked out once (lane_source) and read four scalar loads a k.
// Defs: T (f32), ROWS, INDEX, SPLIT, GEMM, HAS_C, C_ROW, B_PANELS, TRANS_A (A stored [K, M]: a_quad), A_QUADS, A_SCALE,
// A_WINDOW,
// STORE4 (y float32, written as vec4s: llvmpipe pays per store instruction and lane), TRANS_Y
// (y stored [batch, N, M]: y_at; one pass, element stores),
// EPILOGUE*; ONYXIA_SUBGROUPS (set at render).
// Params: M, N, K, A_BS, B_BS, RBLOCKS, SPLITS, KCHUNK, P (with SPLIT), ASCALE_BS (with A_SCALE),
// A_PLANE, A_OW, A_ROWSTEP, A_COLSTEP (with A_WINDOW),
// INDEX params; Gemm: ALPHA, BETA, C_MS, C_NS.
#import common::grid
#import matmul::epilogue
#import matmul::panels  // empty without B_PANELS

const ROWS = #{ROWS}u;
const THREADS = 8u;  // one SIMD batch of lavapipe's 256-bit lanes; small groups balance its threads
#if ROWS > 1
// Each invocation's rows, staged for one store loop: in a private array where the driver
// compiles one indexed at run time as such (ONYXIA_INDEXED_PRIVATE; Mesa 25's lavapipe, ROWS = 32:
// 0.43 s first dispatch against 1.0-1.1 s from workgroup memory, which it stores one lane at a
// time), else in workgroup memory, each invocation its own slots (Mesa 22.3: 0.46 s against 1.1).
#ifdef ONYXIA_INDEXED_PRIVATE
var<private> staged: array<vec4<f32>, ROWS>;
fn staged_slot(row: u32, lid: u32) -> u32 {
    return row;
}
#else
var<workgroup> staged: array<vec4<f32>, ROWS * THREADS>;
fn staged_slot(row: u32, lid: u32) -> u32 {
    return row * THREADS + lid;
}
#endif
#endif

struct Site {
    s: u32,  // K split
    i: u32,  // batch
    m0: u32,  // first row
    c: u32,  // first vec4 column group
}

// `cq`: C at the 4 columns (C_ROW; unused otherwise).
fn put(site: Site, m: u32, c: u32, v: vec4<f32>, cq: vec4<f32>) {
    if (m >= M() || c >= N() / 4u) {
        return;
    }
#ifdef SPLIT
    partial_store4((site.s * P() + (site.i * M() + m) * N()) / 4u + c, v);
#else ifdef STORE4
    let o = y_at(site.i, m, 4u * c);
    y_store4(o / 4u, vec4<f32>(finished(v.x, m, o, 4u * c, cq.x), finished(v.y, m, o + 1u, 4u * c + 1u, cq.y),
                               finished(v.z, m, o + 2u, 4u * c + 2u, cq.z), finished(v.w, m, o + 3u, 4u * c + 3u, cq.w)));
#else
    for (var j = 0u; j < 4u; j++) {
        let at = y_at(site.i, m, 4u * c + j);
        y_store(at, y_t(finished(v[j], m, at, 4u * c + j, cq[j])));
    }
#endif
}

// C at column group c's 4 columns (C_ROW), loaded once an invocation; zeros otherwise.
fn column_c(c: u32) -> vec4<f32> {
#ifdef C_ROW
    return vec4<f32>(f32(c_load(4u * c)), f32(c_load(4u * c + 1u)), f32(c_load(4u * c + 2u)), f32(c_load(4u * c + 3u)));
#else
    return vec4<f32>();
#endif
}

// y's index of output (m, n) of batch i: row-major, or with TRANS_Y column-major ([N, M] a
// batch: a pointwise conv's NCHW output, M its positions, N its channels).
fn y_at(i: u32, m: u32, n: u32) -> u32 {
#ifdef TRANS_Y
    return (i * N() + n) * M() + m;
#else
    return (i * M() + m) * N() + n;
#endif
}

#ifndef SPLIT
// Output (m, n), at y index o, of the product `v`: with the fused ops on the value as stored
// where they run in the store (a pass over the stored outputs after the loop cost each output
// a load and a store more: per-lane accesses on llvmpipe).
fn finished(v: f32, m: u32, o: u32, n: u32, c: f32) -> f32 {
#ifdef EPILOGUE_IN_STORE
    return matmul_epilogue(v, o, n);
#else ifdef C_ROW
    return matmul_add(ALPHA() * v, BETA() * c);  // matmul_finish's sum, C loaded once (column_c)
#else
    return matmul_finish(v, m, n);
#endif
}
#endif

// Where row m of A starts, from the batch's start `a_base` (a_start): row-major A in vec4s; with
// TRANS_A (A stored [K, M], a pointwise conv's input) in elements, the row's k-th value k rows
// of a_plane() on (A_WINDOW: where output position m reads the input).
fn a_row(a_base: u32, m: u32) -> u32 {
#ifdef A_WINDOW
    return a_base + (m / A_OW()) * A_ROWSTEP() + (m % A_OW()) * A_COLSTEP();
#else ifdef TRANS_A
    return a_base + m;
#else
    return a_base + m * (K() / 4u);
#endif
}

// How far apart A's k-major rows lie: M, or with A_WINDOW the input's spatial size (A_PLANE).
fn a_plane() -> u32 {
#ifdef A_WINDOW
    return A_PLANE();
#else
    return M();
#endif
}

fn a_start(batch: u32) -> u32 {
#ifdef TRANS_A
    return batch * A_BS();
#else
    return batch * A_BS() / 4u;  // vec4 indices
#endif
}

// A's values of a row (a_row) at k = 4 * k4 .. 4 * k4 + 3: one vec4 load, or four M apart (on
// llvmpipe a float costs the same loaded alone or in a vec4).
fn a_quad(row: u32, k4: u32) -> vec4<f32> {
#ifdef TRANS_A
    let plane = a_plane();
    let j = row + 4u * k4 * plane;
    return vec4<f32>(f32(a_load(j)), f32(a_load(j + plane)), f32(a_load(j + 2u * plane)), f32(a_load(j + 3u * plane)));
#else
    return vec4<f32>(a_load4(row + k4));
#endif
}

// Rows m .. m + 3 of A at k = 4 * k4 .. 4 * k4 + 3, a column per row (clamped to row M - 1).
fn a_rows(a_base: u32, m: u32, k4: u32) -> mat4x4<f32> {
    let last = M() - 1u;
    return mat4x4<f32>(a_quad(a_row(a_base, min(m, last)), k4), a_quad(a_row(a_base, min(m + 1u, last)), k4),
                       a_quad(a_row(a_base, min(m + 2u, last)), k4), a_quad(a_row(a_base, min(m + 3u, last)), k4));
}

// B's 4 x 4 block at rows 4 * k4 .. + 3, column group c: a column per k. Row-major, a row of B
// is N / 4 groups; in column panels (B_PANELS) a row of c's panel is n4 groups, the panel
// starting at group `first` (vec4 index first * K), so a workgroup streams one contiguous run.
fn b_block(b_base: u32, k4: u32, c: u32) -> mat4x4<f32> {
#ifdef B_PANELS
    let first = c - c % (B_PANEL / 4u);
    let n4 = min(B_PANEL / 4u, N() / 4u - first);
    let j = b_base + first * K() + 4u * k4 * n4 + c - first;
#else
    let n4 = N() / 4u;
    let j = b_base + 4u * k4 * n4 + c;
#endif
#ifdef A_SCALE
    let sk = vec4<f32>(ascale_load4((scale_base + 4u * k4) / 4u));
    return mat4x4<f32>(sk.x * b_load4(j), sk.y * b_load4(j + n4), sk.z * b_load4(j + 2u * n4), sk.w * b_load4(j + 3u * n4));
#else
    return mat4x4<f32>(b_load4(j), b_load4(j + n4), b_load4(j + 2u * n4), b_load4(j + 3u * n4));
#endif
}

#ifdef A_SCALE
var<private> scale_base: u32;  // where the batch's scales start (A_SCALE; a multiple of 4)
#endif

#ifdef A_QUADS
#ifdef A_WINDOW
alias LaneSource = vec4<u32>;

// Where lane `lane` reads A for the rows from m0 + first (A_WINDOW): its 4 rows' input offsets at
// k = lane % 4 of each 4, worked out once (an integer division a row: lavapipe runs them one lane
// at a time), each clamped to row M - 1. (Where the 4 rows lie in one output row at stride 2,
// two aligned vec4s hold them: no faster on lavapipe.)
fn lane_source(a_base: u32, m0: u32, first: u32, lane: u32) -> LaneSource {
    let base = a_base + (lane % 4u) * A_PLANE();
    let m = m0 + first + 4u * (lane / 4u);
    let last = M() - 1u;
    return vec4<u32>(a_row(base, min(m, last)), a_row(base, min(m + 1u, last)), a_row(base, min(m + 2u, last)),
                     a_row(base, min(m + 3u, last)));
}

fn lane_values(source: LaneSource, k4: u32) -> vec4<f32> {
    let step = 4u * k4 * A_PLANE();
    return vec4<f32>(f32(a_load(source.x + step)), f32(a_load(source.y + step)), f32(a_load(source.z + step)),
                     f32(a_load(source.w + step)));
}
#else
alias LaneSource = vec2<u32>;

// Where lane `lane` reads A (k-major) for the rows from m0 + first: (where k = lane % 4 of each 4
// starts, the first of its 4 rows m0 + first + 4 * (lane / 4)).
fn lane_source(a_base: u32, m0: u32, first: u32, lane: u32) -> LaneSource {
    return vec2<u32>(a_base + (lane % 4u) * M(), m0 + first + 4u * (lane / 4u));
}

// The lane's 4 rows at one k of 4 * k4 ..: one vec4 load where M is a multiple of 4 (4 k are M
// vec4s on; a group past M reads the last one), else four, each row clamped to row M - 1 (a
// uniform branch: one kernel serves every M, where a Select of two compiled both).
fn lane_values(source: LaneSource, k4: u32) -> vec4<f32> {
    let at = source.x + 4u * k4 * M();
    if (M() % 4u == 0u) {
        return vec4<f32>(a_load4((at + min(source.y, M() - 4u)) / 4u));
    }
    let last = M() - 1u;
    return vec4<f32>(f32(a_load(at + min(source.y, last))), f32(a_load(at + min(source.y + 1u, last))),
                     f32(a_load(at + min(source.y + 2u, last))), f32(a_load(at + min(source.y + 3u, last))));
}
#endif
#endif

@compute @workgroup_size(8)
fn main(wg: Groups, @builtin(local_invocation_index) lid: u32
#ifdef ONYXIA_SUBGROUPS
        , @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_id: u32
#endif
        ) {
    let n4 = N() / 4u;
    let gg = groups_index(wg) * THREADS + lid;  // this invocation's column group
    let g0 = min(gg, n4 - 1u);
    let s = wg.wid.z % SPLITS();
    let rest = wg.wid.z / SPLITS();
    let i = rest / RBLOCKS();
    let site = Site(s, i, (rest % RBLOCKS()) * ROWS, gg);
    #{INDEX}
    let a_base = a_start(idx_x0);
#ifdef A_SCALE
    scale_base = idx_x0 * ASCALE_BS();
#endif
    let b_base = idx_x1 * B_BS() / 4u;
    let m0 = site.m0;
    let k_begin = s * KCHUNK() / 4u;
    let k_end = kept_bound(min(K(), (s + 1u) * KCHUNK()) / 4u, wg.nwg);  // a loop, not K / 4 copies
#if ROWS == 1
    var acc = vec4<f32>();
    let row = a_row(a_base, m0);
    for (var k4 = k_begin; k4 < k_end; k4++) {
        acc += b_block(b_base, k4, g0) * a_quad(row, k4);
    }
    put(site, m0, gg, acc, column_c(g0));
#else
    // accJ: rows m0 + 4J .. m0 + 4J + 3 (matrix column r = row m0 + 4J + r)
    var acc0 = mat4x4<f32>();
#if ROWS >= 8
    var acc1 = mat4x4<f32>();
#endif
#if ROWS >= 16
    var acc2 = mat4x4<f32>();
    var acc3 = mat4x4<f32>();
#endif
#if ROWS >= 32
    var acc4 = mat4x4<f32>();
    var acc5 = mat4x4<f32>();
    var acc6 = mat4x4<f32>();
    var acc7 = mat4x4<f32>();
#endif
    var lanes_share = false;
#ifdef ONYXIA_SUBGROUPS_OF_8
    lanes_share = true;  // the workgroup's 8 lanes are one subgroup: they share A's rows
#else ifdef ONYXIA_SUBGROUPS
    lanes_share = sg_size == THREADS;  // the workgroup is one subgroup: its lanes share A's rows
#endif
    if (lanes_share) {
#ifdef ONYXIA_SUBGROUPS
#ifdef A_QUADS
        // lane l: rows m0 + 8 J + 4 (l / 4) .. + 3 at k = l % 4 of each 4; block J's transpose is
        // the broadcasts' (a loop of its own: the plain one through these helpers ran ~7 % slower)
        let r0 = lane_source(a_base, m0, 0u, sg_id);
#if ROWS >= 16
        let r1 = lane_source(a_base, m0, 8u, sg_id);
#endif
#if ROWS >= 32
        let r2 = lane_source(a_base, m0, 16u, sg_id);
        let r3 = lane_source(a_base, m0, 24u, sg_id);
#endif
        for (var k4 = k_begin; k4 < k_end; k4++) {
            let b = b_block(b_base, k4, g0);
            let v0 = lane_values(r0, k4);
            acc0 += b * transpose(mat4x4<f32>(subgroupBroadcast(v0, 0u), subgroupBroadcast(v0, 1u),
                                              subgroupBroadcast(v0, 2u), subgroupBroadcast(v0, 3u)));
#if ROWS >= 8
            acc1 += b * transpose(mat4x4<f32>(subgroupBroadcast(v0, 4u), subgroupBroadcast(v0, 5u),
                                              subgroupBroadcast(v0, 6u), subgroupBroadcast(v0, 7u)));
#endif
#if ROWS >= 16
            let v1 = lane_values(r1, k4);
            acc2 += b * transpose(mat4x4<f32>(subgroupBroadcast(v1, 0u), subgroupBroadcast(v1, 1u),
                                              subgroupBroadcast(v1, 2u), subgroupBroadcast(v1, 3u)));
            acc3 += b * transpose(mat4x4<f32>(subgroupBroadcast(v1, 4u), subgroupBroadcast(v1, 5u),
                                              subgroupBroadcast(v1, 6u), subgroupBroadcast(v1, 7u)));
#endif
#if ROWS >= 32
            let v2 = lane_values(r2, k4);
            acc4 += b * transpose(mat4x4<f32>(subgroupBroadcast(v2, 0u), subgroupBroadcast(v2, 1u),
                                              subgroupBroadcast(v2, 2u), subgroupBroadcast(v2, 3u)));
            acc5 += b * transpose(mat4x4<f32>(subgroupBroadcast(v2, 4u), subgroupBroadcast(v2, 5u),
                                              subgroupBroadcast(v2, 6u), subgroupBroadcast(v2, 7u)));
            let v3 = lane_values(r3, k4);
            acc6 += b * transpose(mat4x4<f32>(subgroupBroadcast(v3, 0u), subgroupBroadcast(v3, 1u),
                                              subgroupBroadcast(v3, 2u), subgroupBroadcast(v3, 3u)));
            acc7 += b * transpose(mat4x4<f32>(subgroupBroadcast(v3, 4u), subgroupBroadcast(v3, 5u),
                                              subgroupBroadcast(v3, 6u), subgroupBroadcast(v3, 7u)));
#endif
        }
#else
        let last = M() - 1u;
        let r0 = a_row(a_base, min(m0 + sg_id, last));
#if ROWS >= 16
        let r1 = a_row(a_base, min(m0 + 8u + sg_id, last));
#endif
#if ROWS >= 32
        let r2 = a_row(a_base, min(m0 + 16u + sg_id, last));
        let r3 = a_row(a_base, min(m0 + 24u + sg_id, last));
#endif
        for (var k4 = k_begin; k4 < k_end; k4++) {
            let b = b_block(b_base, k4, g0);
            let v0 = a_quad(r0, k4);
            acc0 += b * mat4x4<f32>(subgroupBroadcast(v0, 0u), subgroupBroadcast(v0, 1u),
                                    subgroupBroadcast(v0, 2u), subgroupBroadcast(v0, 3u));
#if ROWS >= 8
            acc1 += b * mat4x4<f32>(subgroupBroadcast(v0, 4u), subgroupBroadcast(v0, 5u),
                                    subgroupBroadcast(v0, 6u), subgroupBroadcast(v0, 7u));
#endif
#if ROWS >= 16
            let v1 = a_quad(r1, k4);
            acc2 += b * mat4x4<f32>(subgroupBroadcast(v1, 0u), subgroupBroadcast(v1, 1u),
                                    subgroupBroadcast(v1, 2u), subgroupBroadcast(v1, 3u));
            acc3 += b * mat4x4<f32>(subgroupBroadcast(v1, 4u), subgroupBroadcast(v1, 5u),
                                    subgroupBroadcast(v1, 6u), subgroupBroadcast(v1, 7u));
#endif
#if ROWS >= 32
            let v2 = a_quad(r2, k4);
            acc4 += b * mat4x4<f32>(subgroupBroadcast(v2, 0u), subgroupBroadcast(v2, 1u),
                                    subgroupBroadcast(v2, 2u), subgroupBroadcast(v2, 3u));
            acc5 += b * mat4x4<f32>(subgroupBroadcast(v2, 4u), subgroupBroadcast(v2, 5u),
                                    subgroupBroadcast(v2, 6u), subgroupBroadcast(v2, 7u));
            let v3 = a_quad(r3, k4);
            acc6 += b * mat4x4<f32>(subgroupBroadcast(v3, 0u), subgroupBroadcast(v3, 1u),
                                    subgroupBroadcast(v3, 2u), subgroupBroadcast(v3, 3u));
            acc7 += b * mat4x4<f32>(subgroupBroadcast(v3, 4u), subgroupBroadcast(v3, 5u),
                                    subgroupBroadcast(v3, 6u), subgroupBroadcast(v3, 7u));
#endif
        }
#endif
#endif
    } else {
#ifndef ONYXIA_SUBGROUPS_OF_8
        // (not compiled where the subgroup path always runs: it doubled the kernel's compile)
        for (var k4 = k_begin; k4 < k_end; k4++) {
            let b = b_block(b_base, k4, g0);
            acc0 += b * a_rows(a_base, m0, k4);
#if ROWS >= 8
            acc1 += b * a_rows(a_base, m0 + 4u, k4);
#endif
#if ROWS >= 16
            acc2 += b * a_rows(a_base, m0 + 8u, k4);
            acc3 += b * a_rows(a_base, m0 + 12u, k4);
#endif
#if ROWS >= 32
            acc4 += b * a_rows(a_base, m0 + 16u, k4);
            acc5 += b * a_rows(a_base, m0 + 20u, k4);
            acc6 += b * a_rows(a_base, m0 + 24u, k4);
            acc7 += b * a_rows(a_base, m0 + 28u, k4);
#endif
        }
#endif
    }
    // Rows through workgroup memory into one store loop: a put() per row (32 at ROWS = 32, each
    // with its guards and four stores inlined) made the kernel about twice as slow to compile.
    for (var r = 0u; r < 4u; r++) {
        staged[staged_slot(r, lid)] = acc0[r];
#if ROWS >= 8
        staged[staged_slot((4u + r), lid)] = acc1[r];
#endif
#if ROWS >= 16
        staged[staged_slot((8u + r), lid)] = acc2[r];
        staged[staged_slot((12u + r), lid)] = acc3[r];
#endif
#if ROWS >= 32
        staged[staged_slot((16u + r), lid)] = acc4[r];
        staged[staged_slot((20u + r), lid)] = acc5[r];
        staged[staged_slot((24u + r), lid)] = acc6[r];
        staged[staged_slot((28u + r), lid)] = acc7[r];
#endif
    }
    let cq = column_c(g0);
    for (var r = 0u; r < ROWS; r++) {
        put(site, m0 + r, gg, staged[staged_slot(r, lid)], cq);
    }
#endif
#ifdef EPILOGUE4
    // The fused ops over this invocation's stored outputs a vec4 (a row's 4 columns) at a time
    // (gemv.py QUAD_EPILOGUE_ROWS says where and why).
    for (var r = 0u; r < ROWS && m0 + r < M() && 4u * gg < N(); r++) {
        let o = y_at(i, m0 + r, 4u * gg);
        y_store4(o / 4u, matmul_epilogue4(y_load4(o / 4u), o, 4u * gg));
    }
#else ifdef EPILOGUE
#ifndef EPILOGUE_IN_STORE
    // The fused ops over this invocation's stored outputs, ROWS rows of its 4 columns, where
    // they cannot run in the store (matmul::epilogue.py Epilogue.in_store).
    for (var r = 0u; r < ROWS && m0 + r < M(); r++) {
        for (var q = 0u; q < 4u && 4u * gg + q < N(); q++) {
            let n = 4u * gg + q;
            matmul_epilogue_at(y_at(i, m0 + r, n), n);
        }
    }
#endif
#endif
}
