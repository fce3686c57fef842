// Implicit-GEMM convolution: per group g (workgroup z), Y[MG, N*P] = W[MG, K] x patches[K, N*P].
// The patch matrix is never stored: each K-slice of a column tile is gathered from the input
// (im2col on the fly, conv::window) into shared memory. Register blocking as in
// matmul/gemm.wgsl: 16x16 threads, each an RM x RN micro-tile strided by 16 (conflict-free
// shared reads, coalesced writes along the output's spatial axis); the next slice is loaded
// into registers while this one is multiplied.
// Every thread gathers the same column in every slice (256 is a multiple of the tile width
// TN), so its output position is decoded once, not per element.
// Defs: RM, RN, TRANSPOSED, HAS_BIAS. Params: M, ROW_BLOCKS and those of conv::window.
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
#ifdef HAS_BIAS
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
#else
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
#endif
#import conv::window

const RM = #{RM}u;
const RN = #{RN}u;
const TM = 16u * RM;
const TN = 16u * RN;
const BK = 16u;
const KROWS = 256u / TN;  // patch rows one pass of the workgroup gathers
// Padded rows: the transposing stores of the k-contiguous weights would hit one bank 16 times.
const SA = TM + 1u;
const SB = TN + 1u;

var<workgroup> sa: array<f32, 16u * (16u * #{RM}u + 1u)>;  // [k][m]
var<workgroup> sb: array<f32, 16u * (16u * #{RN}u + 1u)>;  // [k][n]

fn load_a(g: u32, m0: u32, k0: u32, lid: u32) -> array<f32, #{RM}> {
    var v: array<f32, #{RM}>;
    for (var l = 0u; l < RM; l++) {
        let e = lid + 256u * l;
        let gk = k0 + e % BK;
        let gm = m0 + e / BK;
        if (gm < MG() && gk < K()) {
            v[l] = conv_weight(g, gm, gk);
        }
    }
    return v;
}

fn store_a(v: array<f32, #{RM}>, lid: u32) {
    for (var l = 0u; l < RM; l++) {
        let e = lid + 256u * l;
        sa[(e % BK) * SA + e / BK] = v[l];
    }
}

fn load_b(col: Column, k0: u32, lid: u32) -> array<f32, #{RN}> {
    var v: array<f32, #{RN}>;
    for (var l = 0u; l < RN; l++) {
        let gk = k0 + lid / TN + l * KROWS;
        if (gk < K()) {
            v[l] = conv_patch(col, gk);
        }
    }
    return v;
}

fn store_b(v: array<f32, #{RN}>, lid: u32) {
    for (var l = 0u; l < RN; l++) {
        sb[(lid / TN + l * KROWS) * SB + lid % TN] = v[l];
    }
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) tid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // z = group * ROW_BLOCKS + row block; column blocks run along x, folded into y by the
    // runtime when there are more than 65535 (surplus blocks see only columns >= NCOLS).
    let g = wid.z / ROW_BLOCKS();
    let m0 = (wid.z % ROW_BLOCKS()) * TM;
    let n0 = (wid.y * nwg.x + wid.x) * TN;
    let col = conv_column(n0 + lid % TN, g);
    var acc: array<array<f32, #{RN}>, #{RM}>;
    var ra: array<f32, #{RM}>;
    var rb: array<f32, #{RN}>;
    var next_a = load_a(g, m0, 0u, lid);
    var next_b = load_b(col, 0u, lid);
    for (var k0 = 0u; k0 < K(); k0 += BK) {
        store_a(next_a, lid);
        store_b(next_b, lid);
        workgroupBarrier();
        if (k0 + BK < K()) {
            next_a = load_a(g, m0, k0 + BK, lid);
            next_b = load_b(col, k0 + BK, lid);
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
    for (var r = 0u; r < RM; r++) {
        let gm = m0 + tid.y + 16u * r;
        if (gm >= MG()) {
            continue;
        }
        let oc = g * MG() + gm;
#ifdef HAS_BIAS
        let b = bias[oc];
#else
        let b = 0.0;
#endif
        for (var q = 0u; q < RN; q++) {
            let gn = n0 + tid.x + 16u * q;
            if (gn < NCOLS()) {
                y[((gn / P()) * M() + oc) * P() + gn % P()] = acc[r][q] + b;
            }
        }
    }
}
