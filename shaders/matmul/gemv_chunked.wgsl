// Matrix product for few rows (decode M = 1, prefills up to 64 rows), the pattern a CPU-type
// adapter (lavapipe) runs fastest: no shared memory, no barriers, and each invocation streams
// its own contiguous run of memory with vec4 loads.
//
// An invocation owns CG = 2 vec4 groups of output columns (8 adjacent columns: each row of B it
// reads is one contiguous 32-byte run) and ROWS rows of A (wid.z = (batch * RBLOCKS + row block)
// * SPLITS + split), and walks its K chunk 4 rows of B at a time: the 4 x 4 block of B under
// each column group is a mat4x4 (columns = k), so one matrix product per 4 k accumulates a vec4
// of columns for a row (ROWS = 1) or a mat4x4 of 4 rows x 4 columns (ROWS = 4, 8, 16: one per 4
// rows). Measured on lavapipe (K = 512, N = 1408): 2 column groups stream ~5 GB/s per core, one
// group ~2.5; with named mat4x4 accumulators 16 rows reach ~9 GF/s per core, where an
// array-indexed accumulator of the same size spills and runs 4x slower.
// A row past M reads row M - 1 and a column group past N / 4 reads the last one; neither stores.
// Each invocation's loop runs KCHUNK / 4 times (KCHUNK <= 16384 by construction: lavapipe stops
// an invocation's loops after ~65k iterations); a longer K is split (SPLIT: partial sums to
// `partial` [SPLITS, P], P = batch * M * N, added by splitk.wgsl).
//
// Buffers: a, b (both read as vec4: K % 4 == 0, N % 4 == 0), [c], [e0, e1, ...], y (or partial with SPLIT).
// Defs: T (f32), ROWS, INDEX, SPLIT, GEMM, HAS_C, EPILOGUE*. Params: M, N, K, A_BS, B_BS, RBLOCKS, SPLITS,
// KCHUNK, P (with SPLIT), INDEX params; Gemm: ALPHA, BETA, C_MS, C_NS.
#import common::grid
#import matmul::epilogue

const CG = 2u;
const ROWS = #{ROWS}u;
const THREADS = 8u;  // one SIMD batch of lavapipe's 256-bit lanes; small groups balance its threads

struct Site {
    s: u32,  // K split
    i: u32,  // batch
    m0: u32,  // first row
    c: u32,  // first vec4 column group
}

fn put(site: Site, m: u32, c: u32, v: vec4<f32>) {
    if (m >= M() || c >= N() / 4u) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let n = 4u * c + j;
#ifdef SPLIT
        partial_store(site.s * P() + (site.i * M() + m) * N() + n, v[j]);
#else
        y_store((site.i * M() + m) * N() + n, y_t(matmul_finish(v[j], m, n)));
#endif
    }
}

// Rows m .. m + 3 of A at k = 4 * k4 .. 4 * k4 + 3, a column per row (clamped to row M - 1).
fn a_rows(a_base: u32, m: u32, k4: u32) -> mat4x4<f32> {
    let k4s = K() / 4u;
    let last = M() - 1u;
    return mat4x4<f32>(a_load4(a_base + min(m, last) * k4s + k4), a_load4(a_base + min(m + 1u, last) * k4s + k4),
                       a_load4(a_base + min(m + 2u, last) * k4s + k4), a_load4(a_base + min(m + 3u, last) * k4s + k4));
}

// B's 4 x 4 block at rows 4 * k4 .. + 3, column group c: a column per k.
fn b_block(b_base: u32, k4: u32, c: u32) -> mat4x4<f32> {
    let n4 = N() / 4u;
    let j = b_base + 4u * k4 * n4 + c;
    return mat4x4<f32>(b_load4(j), b_load4(j + n4), b_load4(j + 2u * n4), b_load4(j + 3u * n4));
}

@compute @workgroup_size(8)
fn main(wg: Grid) {
    let n4 = N() / 4u;
    let g0 = (grid_group(wg) * THREADS + wg.lid) * CG;
    if (g0 >= n4) {
        return;
    }
    let g1 = min(g0 + 1u, n4 - 1u);
    let s = wg.wid.z % SPLITS();
    let rest = wg.wid.z / SPLITS();
    let i = rest / RBLOCKS();
    let site = Site(s, i, (rest % RBLOCKS()) * ROWS, g0);
    #{INDEX}
    let a_base = idx_x0 * A_BS() / 4u;  // vec4 indices
    let b_base = idx_x1 * B_BS() / 4u;
    let m0 = site.m0;
    let k_begin = s * KCHUNK() / 4u;
    let k_end = min(K(), (s + 1u) * KCHUNK()) / 4u;
#if ROWS == 1
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    let a_row = a_base + m0 * (K() / 4u);
    for (var k4 = k_begin; k4 < k_end; k4++) {
        let av = a_load4(a_row + k4);
        acc0 += b_block(b_base, k4, g0) * av;
        acc1 += b_block(b_base, k4, g1) * av;
    }
    put(site, m0, g0, acc0);
    put(site, m0, g0 + 1u, acc1);
#else
    // accRC: column group C, rows m0 + 4R .. m0 + 4R + 3 (matrix column r = row m0 + 4R + r)
    var acc00 = mat4x4<f32>();
    var acc10 = mat4x4<f32>();
#if ROWS >= 8
    var acc01 = mat4x4<f32>();
    var acc11 = mat4x4<f32>();
#endif
#if ROWS >= 16
    var acc02 = mat4x4<f32>();
    var acc12 = mat4x4<f32>();
    var acc03 = mat4x4<f32>();
    var acc13 = mat4x4<f32>();
#endif
    for (var k4 = k_begin; k4 < k_end; k4++) {
        let b0 = b_block(b_base, k4, g0);
        let b1 = b_block(b_base, k4, g1);
        let a0 = a_rows(a_base, m0, k4);
        acc00 += b0 * a0;
        acc10 += b1 * a0;
#if ROWS >= 8
        let a1 = a_rows(a_base, m0 + 4u, k4);
        acc01 += b0 * a1;
        acc11 += b1 * a1;
#endif
#if ROWS >= 16
        let a2 = a_rows(a_base, m0 + 8u, k4);
        acc02 += b0 * a2;
        acc12 += b1 * a2;
        let a3 = a_rows(a_base, m0 + 12u, k4);
        acc03 += b0 * a3;
        acc13 += b1 * a3;
#endif
    }
    for (var r = 0u; r < 4u; r++) {
        put(site, m0 + r, g0, acc00[r]);
        put(site, m0 + r, g0 + 1u, acc10[r]);
#if ROWS >= 8
        put(site, m0 + 4u + r, g0, acc01[r]);
        put(site, m0 + 4u + r, g0 + 1u, acc11[r]);
#endif
#if ROWS >= 16
        put(site, m0 + 8u + r, g0, acc02[r]);
        put(site, m0 + 8u + r, g0 + 1u, acc12[r]);
        put(site, m0 + 12u + r, g0, acc03[r]);
        put(site, m0 + 12u + r, g0 + 1u, acc13[r]);
#endif
    }
#endif
#ifdef EPILOGUE
    // The fused ops over this invocation's stored outputs: ROWS rows of CG * 4 columns.
    for (var r = 0u; r < ROWS && m0 + r < M(); r++) {
        for (var q = 0u; q < 4u * CG && 4u * g0 + q < N(); q++) {
            let n = 4u * g0 + q;
            matmul_epilogue_at((i * M() + m0 + r) * N() + n, n);
        }
    }
#endif
}
