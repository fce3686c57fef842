// Register-blocked tiled matrix product for many rows: y[i] = finish(A[i] @ B[i]).
//
// A workgroup of 16x16 threads computes a TM x TN tile of one output matrix (TM = 16*RM,
// TN = 16*RN); each thread keeps an RM x RN micro-tile in registers, so every value read from
// shared memory feeds RM (or RN) multiply-adds instead of one. The micro-tile is strided (rows
// ty + 16*r, columns tx + 16*c): neighbouring threads read neighbouring shared-memory words
// (no bank conflicts) and write neighbouring output columns (coalesced).
// K advances in slices of BK staged in shared memory; the next slice's global loads are issued
// before this slice's arithmetic and follow each operand's contiguous axis (TRANS_A / TRANS_B:
// the operand is stored transposed), so they coalesce and their latency is hidden.
//
// Defs: T, RM, RN, INDEX (batch index `i` -> idx_x0 / idx_x1), TRANS_A, TRANS_B, GEMM, HAS_C.
// Params: M, N, K; element strides A_MS, A_KS, B_KS, B_NS; batch strides A_BS, B_BS; the INDEX
// code's dims/strides; Gemm: ALPHA, BETA, C_MS, C_NS.
#import matmul::epilogue

@group(0) @binding(0) var<storage, read> a: array<#{T}>;
@group(0) @binding(1) var<storage, read> b: array<#{T}>;
#ifdef HAS_C
@group(0) @binding(2) var<storage, read> c: array<#{T}>;
@group(0) @binding(3) var<storage, read_write> y: array<#{T}>;
#else
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;
#endif

const RM = #{RM}u;
const RN = #{RN}u;
const TM = 16u * RM;
const TN = 16u * RN;
const BK = 16u;
// Rows of the staged slices are padded by one word: the transposing stores of a k-contiguous
// operand would otherwise hit one bank 16 times.
const SA = TM + 1u;
const SB = TN + 1u;

var<workgroup> sa: array<#{T}, 16u * (16u * #{RM}u + 1u)>;  // [k][m]
var<workgroup> sb: array<#{T}, 16u * (16u * #{RN}u + 1u)>;  // [k][n]

// This thread's share of the A slice starting at k0: RM words along A's contiguous axis.
fn load_a(a_base: u32, m0: u32, k0: u32, lid: u32) -> array<#{T}, #{RM}> {
    var v: array<#{T}, #{RM}>;
    for (var l = 0u; l < RM; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_A
        let gm = m0 + e % TM;
        let gk = k0 + e / TM;
#else
        let gk = k0 + e % BK;
        let gm = m0 + e / BK;
#endif
        if (gm < M() && gk < K()) {
            v[l] = a[a_base + gm * A_MS() + gk * A_KS()];
        }
    }
    return v;
}

fn store_a(v: array<#{T}, #{RM}>, lid: u32) {
    for (var l = 0u; l < RM; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_A
        sa[(e / TM) * SA + e % TM] = v[l];
#else
        sa[(e % BK) * SA + e / BK] = v[l];
#endif
    }
}

fn load_b(b_base: u32, n0: u32, k0: u32, lid: u32) -> array<#{T}, #{RN}> {
    var v: array<#{T}, #{RN}>;
    for (var l = 0u; l < RN; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_B
        let gk = k0 + e % BK;
        let gn = n0 + e / BK;
#else
        let gn = n0 + e % TN;
        let gk = k0 + e / TN;
#endif
        if (gn < N() && gk < K()) {
            v[l] = b[b_base + gk * B_KS() + gn * B_NS()];
        }
    }
    return v;
}

fn store_b(v: array<#{T}, #{RN}>, lid: u32) {
    for (var l = 0u; l < RN; l++) {
        let e = lid + 256u * l;
#ifdef TRANS_B
        sb[(e % BK) * SB + e / BK] = v[l];
#else
        sb[(e / TN) * SB + e % TN] = v[l];
#endif
    }
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) tid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wid.z;
    #{INDEX}
    let a_base = idx_x0 * A_BS();
    let b_base = idx_x1 * B_BS();
    let m0 = wid.y * TM;
    let n0 = wid.x * TN;
    var acc: array<array<#{T}, #{RN}>, #{RM}>;
    var ra: array<#{T}, #{RM}>;
    var rb: array<#{T}, #{RN}>;
    // Software pipelining: registers carry the next slice while shared memory holds this one.
    var next_a = load_a(a_base, m0, 0u, lid);
    var next_b = load_b(b_base, n0, 0u, lid);
    for (var k0 = 0u; k0 < K(); k0 += BK) {
        store_a(next_a, lid);
        store_b(next_b, lid);
        workgroupBarrier();
        if (k0 + BK < K()) {
            next_a = load_a(a_base, m0, k0 + BK, lid);
            next_b = load_b(b_base, n0, k0 + BK, lid);
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
                    acc[r][q] += ra[r] * rb[q];
                }
            }
        }
        workgroupBarrier();
    }
    let y_base = i * M() * N();
    for (var r = 0u; r < RM; r++) {
        let gm = m0 + tid.y + 16u * r;
        for (var q = 0u; q < RN; q++) {
            let gn = n0 + tid.x + 16u * q;
            if (gm < M() && gn < N()) {
                y[y_base + gm * N() + gn] = matmul_finish(acc[r][q], gm, gn);
            }
        }
    }
}
