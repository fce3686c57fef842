// FusedAttention, register kernel: softmax(scale * q k^T + mask) v with one invocation per
// query row (and split of its keys), for CPU-type adapters where a workgroup's barriers cost
// coroutine switches. The invocation keeps q and its DV output columns in vec4 registers and
// walks its keys once with an online softmax (running max m, denominator l, accumulators
// rescaled by exp(m_old - m_new)): no scores in memory, no barrier. Consecutive invocations
// are consecutive rows of one (batch, head, split), so they read the same key and value rows.
// A key whose float mask entry is -inf (or at most NEG, the float minimum torch's masks use)
// is skipped; a row without a live key outputs zeros.
// SPLIT_KV (attention::split's layout, operators/attention/split_kv.py): a row's keys are split
// into SPLITS runs of KPS, each bounding an invocation's loop iterations (KPS * (D4 + DV4 + 1)
// stays under the loop cap); with more than one each stores its unnormalized state (m, l, DV
// accumulators) and attention/combine.wgsl merges them.
// Buffers: q, k, v (vec4), [mask], y, [partial]. Defs: D4, DV4, MASK_FLOAT, SPLIT_KV, KPS,
// WG_SIZE. Params: N (rows x SPLITS), H, S, T, SCALE, MT, element strides QB/QH/QS, KB/KH/KS,
// VB/VH/VS, YB/YH/YS, MB/MH/MS, [SPLITS, COLS].
#import common::grid

const NEG = -3.0e38;
const D4 = #{D4}u;
const DV4 = #{DV4}u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) {
        return;
    }
    let s = i % S();
    let r = i / S();
    let h = r % H();
#ifdef SPLIT_KV
    let split = (r / H()) % SPLITS();
    let b = r / (H() * SPLITS());
    let j0 = min(split * #{KPS}u, T());
    let j1 = min(T(), j0 + #{KPS}u);
#else
    let b = r / H();
    let j0 = 0u;
    let j1 = T();
#endif
    var q: array<vec4<f32>, D4>;
    let qrow = (b * QB() + h * QH() + s * QS()) / 4u;
    for (var c = 0u; c < D4; c++) {
        q[c] = vec4<f32>(q_load4(qrow + c)) * SCALE();
    }
    let kbase = b * KB() + h * KH();
    let vbase = b * VB() + h * VH();
    let mrow = b * MB() + h * MH() + s * MS();
    var acc: array<vec4<f32>, DV4>;
    var m = NEG;
    var l = 0.0;
    for (var j = j0; j < j1; j++) {
        var bias = 0.0;
#ifdef MASK_FLOAT
        if (j >= MT()) {
            continue;
        }
        bias = f32(mask_load(mrow + j));
        if (!(bias > NEG)) {
            continue;
        }
#endif
        let krow = (kbase + j * KS()) / 4u;
        var score = 0.0;
        for (var c = 0u; c < D4; c++) {
            score += dot(q[c], vec4<f32>(k_load4(krow + c)));
        }
        score += bias;
        let m_new = max(m, score);
        let alpha = exp(m - m_new);
        let p = exp(score - m_new);
        l = l * alpha + p;
        m = m_new;
        let vrow = (vbase + j * VS()) / 4u;
        for (var c = 0u; c < DV4; c++) {
            acc[c] = acc[c] * alpha + p * vec4<f32>(v_load4(vrow + c));
        }
    }
#ifdef SPLIT_KV
    if (SPLITS() > 1u) {
        let out = (((b * H() + h) * S() + s) * SPLITS() + split) * (COLS() + 2u);
        partial_store(out, m);
        partial_store(out + 1u, l);
        for (var c = 0u; c < DV4; c++) {
            for (var e = 0u; e < 4u; e++) {
                partial_store(out + 2u + 4u * c + e, acc[c][e]);
            }
        }
        return;
    }
#endif
    let inv = select(0.0, 1.0 / l, l > 0.0);
    let yrow = b * YB() + h * YH() + s * YS();
    for (var c = 0u; c < DV4; c++) {
        for (var e = 0u; e < 4u; e++) {
            y_store(yrow + 4u * c + e, y_t(acc[c][e] * inv));
        }
    }
}
