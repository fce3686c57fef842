#define_import_path matmul::tile

// The register-blocked tile product of matmul/gemm.wgsl and conv/conv_gemm.wgsl.
//
// A workgroup of 16x16 threads computes a TM x TN tile of a product A[M, K] x B[K, N] (TM = 16*RM,
// TN = 16*RN); each thread keeps an RM x RN micro-tile in registers, so every value read from
// shared memory feeds RM (or RN) multiply-adds instead of one. The micro-tile is strided (rows
// ty + 16*r, columns tx + 16*q): neighbouring threads read neighbouring shared-memory words (no
// bank conflicts) and write neighbouring output columns (coalesced).
// K advances in slices of BK staged in shared memory; the next slice's global loads are issued
// before this slice's arithmetic and follow each operand's contiguous axis, so they coalesce and
// their latency is hidden: k for A and n for B, or m for A with TRANS_A and k for B with TRANS_B.
// The loads assume that TN divides 256 (a thread's B elements then share one column).
//
// The importer declares:
//   alias TileValue = ...;  // the element type
//   struct TileSource { ... }  // what its loads need (batch offsets, a decoded column, ...)
//   fn tile_a(src: TileSource, m: u32, k: u32) -> TileValue  // A[m, k], 0 outside A
//   fn tile_b(src: TileSource, k: u32, n: u32) -> TileValue  // B[k, n], 0 outside B
//   fn tile_mac(acc: TileValue, a: TileValue, b: TileValue) -> TileValue  // acc + a * b
// and the param K() (the whole reduction). Defs: RM, RN, TRANS_A, TRANS_B.

const RM = #{RM}u;
const RN = #{RN}u;
const TM = 16u * RM;
const TN = 16u * RN;
const BK = 16u;
// Rows of the staged slices are padded by one word: the transposing stores of a k-contiguous
// operand would otherwise hit one bank 16 times.
const SA = TM + 1u;
const SB = TN + 1u;

var<workgroup> sa: array<TileValue, 16u * (16u * #{RM}u + 1u)>;  // [k][m]
var<workgroup> sb: array<TileValue, 16u * (16u * #{RN}u + 1u)>;  // [k][n]

// This thread's share of the A slice starting at k0: RM elements along A's contiguous axis.
fn tile_load_a(src: TileSource, m0: u32, k0: u32, lid: u32) -> array<TileValue, RM> {
    var v: array<TileValue, RM>;
    for (var l = 0u; l < RM; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_A
        v[l] = tile_a(src, m0 + e % TM, k0 + e / TM);
#else
        v[l] = tile_a(src, m0 + e / BK, k0 + e % BK);
#endif
    }
    return v;
}

fn tile_store_a(v: array<TileValue, RM>, lid: u32) {
    for (var l = 0u; l < RM; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_A
        sa[(e / TM) * SA + e % TM] = v[l];
#else
        sa[(e % BK) * SA + e / BK] = v[l];
#endif
    }
}

fn tile_load_b(src: TileSource, n0: u32, k0: u32, lid: u32) -> array<TileValue, RN> {
    var v: array<TileValue, RN>;
    for (var l = 0u; l < RN; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_B
        v[l] = tile_b(src, k0 + e % BK, n0 + e / BK);
#else
        v[l] = tile_b(src, k0 + e / TN, n0 + e % TN);
#endif
    }
    return v;
}

fn tile_store_b(v: array<TileValue, RN>, lid: u32) {
    for (var l = 0u; l < RN; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_B
        sb[(e % BK) * SB + e / BK] = v[l];
#else
        sb[(e / TN) * SB + e % TN] = v[l];
#endif
    }
}

// The micro-tile of thread `tid` in the tile at (m0, n0) over the K range [k_begin, k_end):
// acc[r][q] = sum over k of A[m0 + tid.y + 16r, k] * B[k, n0 + tid.x + 16q].
// k_begin is a multiple of BK and k_end either one too or K (tile_a / tile_b return 0 past K),
// so consecutive ranges add up to the whole product. The caller bounds k_end - k_begin: the
// slice loop and its unrolled-or-not inner loop run about (k_end - k_begin) * 17 / 16 times,
// and lavapipe stops an invocation's loops after ~65,535 iterations in all.
fn tile_product(src: TileSource, m0: u32, n0: u32, tid: vec3<u32>, lid: u32, k_begin: u32,
                k_end: u32) -> array<array<TileValue, RN>, RM> {
    var acc: array<array<TileValue, RN>, RM>;
    var ra: array<TileValue, RM>;
    var rb: array<TileValue, RN>;
    // Software pipelining: registers carry the next slice while shared memory holds this one.
    var next_a = tile_load_a(src, m0, k_begin, lid);
    var next_b = tile_load_b(src, n0, k_begin, lid);
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        tile_store_a(next_a, lid);
        tile_store_b(next_b, lid);
        workgroupBarrier();
        if (k0 + BK < k_end) {
            next_a = tile_load_a(src, m0, k0 + BK, lid);
            next_b = tile_load_b(src, n0, k0 + BK, lid);
        }
        for (var kk = 0u; kk < BK; kk++) {
            for (var r = 0u; r < RM; r++) {
                ra[r] = sa[kk * SA + tid.y + 16u * r];
            }
            for (var q = 0u; q < RN; q++) {
                rb[q] = sb[kk * SB + tid.x + 16u * q];
            }
            for (var r = 0u; r < RM; r++) {
                for (var q = 0u; q < RN; q++) {
                    acc[r][q] = tile_mac(acc[r][q], ra[r], rb[q]);
                }
            }
        }
        workgroupBarrier();
    }
    return acc;
}
