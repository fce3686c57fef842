// Matrix product for few rows (decode: M = 1 with M symbolic), work split over N and K.
//
// A workgroup owns NCOL output columns and one K chunk (split-K: wid.z = batch * SPLITS + s);
// its KL lanes per column walk the chunk and every lane accumulates all rows m < M at once
// (MT rows per pass), so each element of B is read once per pass. Without TRANS_B the 64
// threads of a lane read 64 adjacent columns of one row of B; with TRANS_B (B stored [N, K], as
// Gemm's transB) 64 lanes read 64 adjacent k of one row of B^T. Either way the reads coalesce,
// and the A element a lane needs is the same for every column (a broadcast load).
// The KL partial sums of a column meet in shared memory (tree reduction). With SPLIT the
// chunk's sum goes to `partial` ([SPLITS, P] with P = batch * M * N) for splitk.wgsl to add up;
// otherwise it is finished and stored here.
//
// Buffers: a, b, [c], [e0, e1, ...], y (or partial with SPLIT). Defs: T (compute type), CHECKED, MT, INDEX, TRANS_B, B_PANELS (B in column panels: no B_KS, B_NS), SPLIT, GEMM, HAS_C, EPILOGUE*. Params: M, N, K, A_MS, A_KS, B_KS, B_NS,
// A_BS, B_BS, SPLITS, KCHUNK, P (with SPLIT), INDEX params; Gemm: ALPHA, BETA, C_MS, C_NS.
#import common::grid
#import matmul::epilogue
#import matmul::panels  // empty without B_PANELS

const MT = #{MT}u;
#ifdef LANES8
// For CPU-type adapters (operators/matmul/matmul.py "lanes"): a workgroup of 8 invocations, one
// SIMD batch of llvmpipe's lanes, each walking its column's whole K chunk alone, row after row,
// with no barrier and no shared-memory sum. The 256-thread form with its tree reduction and
// MT-row unrolling compiles for ~0.5 s on Mesa 25's lavapipe; this one in a fraction of that.
const NCOL = 8u;
const KL = 1u;
#else ifdef TRANS_B
const NCOL = 4u;
const KL = 64u;
const KSTRIDE = 1u;  // lane = lid % KL
#else
const NCOL = 64u;
const KL = 4u;
const KSTRIDE = 64u;  // lane = lid / NCOL
#endif

#ifndef LANES8
var<workgroup> red: array<#{T}, 256u * #{MT}u>;
#endif

// The index of B[k, n] in the batch's matrix at b_base.
fn b_at(b_base: u32, k: u32, n: u32) -> u32 {
#ifdef B_PANELS
    return b_base + b_panel_index(k, n);
#else
    return b_base + k * B_KS() + n * B_NS();
#endif
}

#ifdef LANES8
@compute @workgroup_size(8)
#else
@compute @workgroup_size(WORKGROUP_SIZE)
#endif
fn main(wg: Groups, @builtin(local_invocation_index) lid: u32) {
    let block = groups_index(wg);
    if (block * NCOL >= N()) {
        return;
    }
    let s = wg.wid.z % SPLITS();
    let i = wg.wid.z / SPLITS();
    #{INDEX}
    let a_base = idx_x0 * A_BS();
    let b_base = idx_x1 * B_BS();
#ifdef LANES8
    let lane = 0u;
    let col = lid;
#else ifdef TRANS_B
    let lane = lid % KL;
    let col = lid / KL;
#else
    let col = lid % NCOL;
    let lane = lid / NCOL;
#endif
    let n = block * NCOL + col;
    let n_read = min(n, N() - 1u);  // out-of-range columns compute garbage they never store
    let k_begin = s * KCHUNK();
    let k_end = kept_bound(min(K(), k_begin + KCHUNK()), wg.nwg);  // a loop, not unrolled copies
#ifdef LANES8
    // Row by row (the Select's guard: at most 8), one accumulator: two load sites and a store,
    // where the MT-row form below unrolls MT of each (B is read once a row instead of once).
    for (var m = 0u; m < M(); m++) {
        var acc = #{T}(0);
        let a_row = a_base + m * A_MS();
        for (var k = k_begin; k < k_end; k++) {
            acc = matmul_mac(acc, #{T}(a_load(a_row + k * A_KS())), #{T}(b_load(b_at(b_base, k, n_read))));
        }
        if (n < N()) {
#ifdef SPLIT
            partial_store(s * P() + (i * M() + m) * N() + n, partial_t(acc));
#else
            y_store((i * M() + m) * N() + n, y_t(matmul_finish(acc, m, n)));
#ifdef EPILOGUE
            matmul_epilogue_at((i * M() + m) * N() + n, n);
#endif
#endif
        }
    }
#else
    for (var m0 = 0u; m0 < M(); m0 += MT) {
        let rows = min(MT, M() - m0);
        var acc: array<#{T}, #{MT}>;
        if (rows == 1u) {  // decode: a tight loop (the branch is uniform, taken by every thread)
            for (var k = k_begin + lane; k < k_end; k += KL) {
                acc[0] = matmul_mac(acc[0], #{T}(a_load(a_base + m0 * A_MS() + k * A_KS())),
                                    #{T}(b_load(b_at(b_base, k, n_read))));
            }
        } else {
            for (var k = k_begin + lane; k < k_end; k += KL) {
                let bv = #{T}(b_load(b_at(b_base, k, n_read)));
                let a_row = a_base + m0 * A_MS() + k * A_KS();
                for (var r = 0u; r < MT; r++) {
                    if (r < rows) {
                        acc[r] = matmul_mac(acc[r], #{T}(a_load(a_row + r * A_MS())), bv);
                    }
                }
            }
        }
        for (var r = 0u; r < MT; r++) {  // constant bounds keep `acc` in registers
            if (r < rows) {
                red[r * 256u + lid] = acc[r];
            }
        }
        workgroupBarrier();
        for (var st = KL / 2u; st > 0u; st >>= 1u) {
            if (lane < st) {
                for (var r = 0u; r < rows; r++) {
                    red[r * 256u + lid] = matmul_add(red[r * 256u + lid], red[r * 256u + lid + st * KSTRIDE]);
                }
            }
            workgroupBarrier();
        }
        if (lane == 0u && n < N()) {
            for (var r = 0u; r < rows; r++) {
                let m = m0 + r;
                let v = red[r * 256u + lid];
#ifdef SPLIT
                partial_store(s * P() + (i * M() + m) * N() + n, partial_t(v));
#else
                y_store((i * M() + m) * N() + n, y_t(matmul_finish(v, m, n)));
#endif
            }
#ifdef EPILOGUE
            for (var r = 0u; r < rows; r++) {
                matmul_epilogue_at((i * M() + m0 + r) * N() + n, n);
            }
#endif
        }
        workgroupBarrier();  // `red` is reused by the next pass
    }
#endif
}
