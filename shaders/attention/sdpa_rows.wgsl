// FusedAttention, register kernel: softmax(scale * q k^T + mask) v with one invocation per four
// query rows (and split of their keys), for CPU-type adapters where a workgroup's barriers cost
// coroutine switches. The four rows ride in the lanes of vec4s: a key row's vec4 c times q's vec4 c
// of the four rows (a mat4x4, column r = row r) gives four partial dots, so one key load serves
// four rows. Each row's online softmax (running max m, denominator l, accumulators rescaled by
// exp(m_old - m_new)) is a lane of m and l: no scores in memory, no barrier. Consecutive
// invocations are consecutive row quads of one (batch, head, split) and read the same key and
// value rows. Keys go eight at a time, two blocks of four.
// Compile time: nothing is indexed by a head element in private memory: q is read from its
// buffer inside the dot loop and the accumulators live in the scratch `acc` (f32 vec4s; lane l
// of a workgroup's element c at (c * WG + l), so one workgroup's lanes touch neighbouring vec4s).
// With q and the accumulators as private arrays of D/4 and DV/4 mat4x4s (unrolled, or lowered to
// branch ladders by lavapipe) the kernel took 2.1 s to compile at head size 32, 5.1 s at 64 and
// 30 s at 512 (a VAE's mid-block attention); now 0.25-0.6 s.
// A key whose float mask entry is -inf (or at most NEG, the float minimum torch's masks use) is
// skipped for its row; a row without a live key outputs zeros. Rows past S are computed as dead.
// SPLIT_KV (attention::split's layout, operators/attention/split_kv.py): the keys are split into
// SPLITS runs of KPS, bounding an invocation's loop iterations (KPS / 8 * (D/4 + DV/4 + 12) stays
// under the loop cap); with more than one each stores its rows' unnormalized states (m, l, DV
// accumulators) and attention/combine.wgsl merges them.
// Buffers: q, k, v (vec4), [mask], y, acc (vec4 scratch: N rounded up to WG_SIZE x DV f32 x 4),
// [partial]. Defs: MASK_FLOAT, SPLIT_KV, WG_SIZE. Params: N (B x H x SPLITS x ceil(S / 4)), H, S,
// T, D, DV, SCALE, MT, element strides QB/QH/QS, KB/KH/KS, VB/VH/VS, YB/YH/YS, MB/MH/MS,
// [SPLITS, COLS, KPS]; with OFFSETS (a def) Q0, K0, V0.
#import common::grid
#import attention::operands


const NEG = -3.0e38;
const WG = #{WG_SIZE}u;

// Four keys from j on (clamped below j1) and, per row e, which count (live[e] lane k) and the
// mask's addition (bias column e).
struct KeyBlock {
    keys: vec4<u32>,
    live: array<vec4<bool>, 4>,
    bias: mat4x4<f32>,
}

fn key_block(j: u32, j1: u32, alive: vec4<bool>, mrow: vec4<u32>) -> KeyBlock {
    var blk: KeyBlock;
    let at = vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u);
    blk.keys = min(at, vec4<u32>(j1 - 1u));
    for (var e = 0u; e < 4u; e++) {
        blk.live[e] = (at < vec4<u32>(j1)) & vec4<bool>(alive[e]);
#ifdef MASK_FLOAT
        let mk = min(blk.keys, vec4<u32>(MT() - 1u));
        let row_bias = vec4<f32>(f32(mask_load(mrow[e] + mk.x)), f32(mask_load(mrow[e] + mk.y)),
                                 f32(mask_load(mrow[e] + mk.z)), f32(mask_load(mrow[e] + mk.w)));
        blk.live[e] = blk.live[e] & (blk.keys < vec4<u32>(MT())) & (row_bias > vec4<f32>(NEG));
        blk.bias[e] = select(vec4<f32>(0.0), row_bias, blk.live[e]);
#endif
    }
    return blk;
}

// Vec4 c of four key rows (starting at vec4 offsets `rows`), one per column.
fn rows4(rows: vec4<u32>, c: u32) -> mat4x4<f32> {
    return mat4x4<f32>(vec4<f32>(k_load4(rows.x + c)), vec4<f32>(k_load4(rows.y + c)),
                       vec4<f32>(k_load4(rows.z + c)), vec4<f32>(k_load4(rows.w + c)));
}

fn values4(rows: vec4<u32>, c: u32) -> mat4x4<f32> {
    return mat4x4<f32>(vec4<f32>(v_load4(rows.x + c)), vec4<f32>(v_load4(rows.y + c)),
                       vec4<f32>(v_load4(rows.z + c)), vec4<f32>(v_load4(rows.w + c)));
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) {
        return;
    }
    let quads = (S() + 3u) / 4u;
    let s0 = (i % quads) * 4u;
    let r = i / quads;
    let h = r % H();
#ifdef SPLIT_KV
    let split = (r / H()) % SPLITS();
    let b = r / (H() * SPLITS());
    let j0 = min(split * KPS(), T());
    let j1 = min(T(), j0 + KPS());
#else
    let b = r / H();
    let j0 = 0u;
    let j1 = T();
#endif
    // Rows past S repeat row S - 1 (in bounds) and stay dead.
    let rows = min(vec4<u32>(s0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(S() - 1u));
    let alive = vec4<u32>(s0) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(S());
    let offs = operand_offsets();
    let qrow = (vec4<u32>(b * QB() + h * QH() + offs.x) + rows * QS()) / 4u;
    // Loops over the head's vec4s, kept loops (common::grid): unrolled for heads of 8 (2 trips),
    // the kernel compiled in 4.6 s on Mesa 25, 1.8 s as loops.
    let d4 = kept_bound(D() / 4u, wg.nwg);
    let dv4 = kept_bound(DV() / 4u, wg.nwg);
    // This invocation's accumulators: vec4 (c, e) at abase + (4 * c + e) * WG.
    let abase = (i / WG) * dv4 * 4u * WG + i % WG;
    for (var c = 0u; c < 4u * dv4; c++) {
        acc_store4(abase + c * WG, vec4<f32>(0.0));
    }
    let kbase = b * KB() + h * KH() + offs.y;
    let vbase = b * VB() + h * VH() + offs.z;
    let mrow = vec4<u32>(b * MB() + h * MH()) + rows * MS();
    var m = vec4<f32>(NEG);
    var l = vec4<f32>(0.0);
    // Keys eight at a time, as two blocks of four: the 4 x 4 scores of a block come from d4
    // mat4x4 products, and q and the accumulators are read (and written) once per eight keys.
    for (var j = j0; j < j1; j += 8u) {
        let lo = key_block(j, j1, alive, mrow);
        let hi = key_block(j + 4u, j1, alive, mrow);
        let krow_lo = (vec4<u32>(kbase) + lo.keys * KS()) / 4u;
        let krow_hi = (vec4<u32>(kbase) + hi.keys * KS()) / 4u;
        var d_lo = mat4x4<f32>();  // column r: row r's dots with the block's four keys
        var d_hi = mat4x4<f32>();
        for (var c = 0u; c < d4; c++) {
            let q = mat4x4<f32>(vec4<f32>(q_load4(qrow.x + c)), vec4<f32>(q_load4(qrow.y + c)),
                                vec4<f32>(q_load4(qrow.z + c)), vec4<f32>(q_load4(qrow.w + c)));
            d_lo += transpose(rows4(krow_lo, c)) * q;
            d_hi += transpose(rows4(krow_hi, c)) * q;
        }
        let s_lo = lo.bias + d_lo * SCALE();
        let s_hi = hi.bias + d_hi * SCALE();
        var p_lo = mat4x4<f32>();
        var p_hi = mat4x4<f32>();
        var alpha = vec4<f32>(1.0);
        for (var e = 0u; e < 4u; e++) {
            let a = select(vec4<f32>(NEG), s_lo[e], lo.live[e]);
            let b = select(vec4<f32>(NEG), s_hi[e], hi.live[e]);
            let top = max(a, b);
            let m_new = max(m[e], max(max(top.x, top.y), max(top.z, top.w)));
            alpha[e] = exp(m[e] - m_new);
            p_lo[e] = select(vec4<f32>(0.0), exp(a - vec4<f32>(m_new)), lo.live[e]);
            p_hi[e] = select(vec4<f32>(0.0), exp(b - vec4<f32>(m_new)), hi.live[e]);
            l[e] = l[e] * alpha[e] + dot(p_lo[e] + p_hi[e], vec4<f32>(1.0));
            m[e] = m_new;
        }
        let vrow_lo = (vec4<u32>(vbase) + lo.keys * VS()) / 4u;
        let vrow_hi = (vec4<u32>(vbase) + hi.keys * VS()) / 4u;
        for (var c = 0u; c < dv4; c++) {
            let at = abase + 4u * c * WG;
            let a = mat4x4<f32>(acc_load4(at) * alpha.x, acc_load4(at + WG) * alpha.y,
                                acc_load4(at + 2u * WG) * alpha.z, acc_load4(at + 3u * WG) * alpha.w)
                + values4(vrow_lo, c) * p_lo + values4(vrow_hi, c) * p_hi;
            acc_store4(at, a[0]);
            acc_store4(at + WG, a[1]);
            acc_store4(at + 2u * WG, a[2]);
            acc_store4(at + 3u * WG, a[3]);
        }
    }
    let inv = select(vec4<f32>(0.0), vec4<f32>(1.0) / l, l > vec4<f32>(0.0));
    for (var e = 0u; e < 4u; e++) {
        if (!alive[e]) {
            continue;
        }
        let row = (b * H() + h) * S() + rows[e];
#ifdef SPLIT_KV
        if (SPLITS() > 1u) {
            let out = (row * SPLITS() + split) * (COLS() + 2u);
            partial_store(out, m[e]);
            partial_store(out + 1u, l[e]);
            for (var c = 0u; c < dv4; c++) {
                let a = acc_load4(abase + (4u * c + e) * WG);
                for (var x = 0u; x < 4u; x++) {
                    partial_store(out + 2u + 4u * c + x, a[x]);
                }
            }
            continue;
        }
#endif
        let yrow = b * YB() + h * YH() + rows[e] * YS();
        for (var c = 0u; c < dv4; c++) {
            let a = acc_load4(abase + (4u * c + e) * WG) * inv[e];
            for (var x = 0u; x < 4u; x++) {
                y_store(yrow + 4u * c + x, y_t(a[x]));
            }
        }
    }
}
