// GroupQueryAttention, step 2: softmax(q k^T * scale) v over the present KV cache, fused.
//
// One workgroup per (query head h, query row s, batch b): grid (H, S, B). Query head h reads
// KV head h / (H / KVH). Keys are visited in chunks of WG (one key per thread) with an
// online softmax (flash-attention style): the running max m is uniform across the workgroup,
// each thread keeps its share of the denominator, and thread lanes own vec4 output columns
// c = lid + k * WG (DPT of them) whose accumulators are rescaled when m grows. Nothing of
// size total_sequence_length is materialized, so the kernel does not depend on it.
//
// Visible keys for row s of batch b: [start, end) with past_b as in gqa_kv.wgsl,
// end = past_b + s + 1 (causal) or seqlens_k[b] + 1, clamped to T; start = end - WINDOW
// when a sliding window is set. Scores are scale * q.k, then softcap * tanh(x / softcap).
// K and V rows are read as vec4 (head sizes are multiples of 8): D4 = D / 4 vectors per row.
// Bindings (BINDINGS def): query, seqlens, total_len, [cos_cache, sin_cache], present_k,
// present_v (both array<vec4<f32>>) | output.
// Defs: BINDINGS, DIM (head size, static), DPT (vec4 columns per thread), ROTARY, INTERLEAVED,
// CAUSAL, WINDOW, SOFTCAP.
// Params: S, T, H, KVH, D, D4, Q_ROW (elements per token row of query), SCALE, WINDOW_SIZE, CAP,
// HALF, MAXPOS.
#import attention::rope

#import attention::reduce
#{BINDINGS}

const DPT = #{DPT}u;
const NEG = -3.0e38;  // "minus infinity" that keeps exp(m_old - m_new) free of inf - inf

var<workgroup> q_sh: array<f32, #{DIM}>;
var<workgroup> q4: array<vec4<f32>, #{DIM} / 4>;
var<workgroup> p_sh: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let s = wid.y;
    let b = wid.z;
    let g = h / (H() / KVH());
    let total_b = u32(max(seqlens[b] + 1, 0));
    var past = 0u;
    if (i32(S()) != total_len[0]) {
        past = u32(max(i32(total_b) - i32(S()), 0));
    }
    let pos = past + s;
#ifdef CAUSAL
    let end = min(pos + 1u, T());
#else
    let end = min(total_b, T());
#endif
    var start = 0u;
#ifdef WINDOW
    if (end > WINDOW_SIZE()) {
        start = end - WINDOW_SIZE();
    }
#endif

    // The query row, rotated, with the scale folded in.
    let qrow = (b * S() + s) * Q_ROW() + h * D();
    for (var d = lid; d < D(); d += WG) {
        var q = query[qrow + d];
#ifdef ROTARY
        let rp = rope_pair(d, HALF());
        if (rp.rotated) {
            let c = min(pos, MAXPOS() - 1u) * HALF() + rp.col;
            q = q * cos_cache[c] + rp.sign * query[qrow + rp.partner] * sin_cache[c];
        }
#endif
        q_sh[d] = q * SCALE();
    }
    workgroupBarrier();
    for (var c = lid; c < D4(); c += WG) {
        q4[c] = vec4(q_sh[4u * c], q_sh[4u * c + 1u], q_sh[4u * c + 2u], q_sh[4u * c + 3u]);
    }
    workgroupBarrier();

    let kv = (b * KVH() + g) * T();
    var m = NEG;
    var l = 0.0;
    var acc: array<vec4<f32>, DPT>;
    for (var c0 = start; c0 < end; c0 += WG) {
        let j = c0 + lid;
        var score = NEG;
        if (j < end) {
            let krow = (kv + j) * D4();
            var dot4 = vec4(0.0);
            for (var c = 0u; c < D4(); c++) {
                dot4 += q4[c] * present_k[krow + c];
            }
            var dot = dot4.x + dot4.y + dot4.z + dot4.w;
#ifdef SOFTCAP
            // tanh of a clamped argument: some drivers compute tanh through exp and overflow.
            dot = CAP() * tanh(clamp(dot / CAP(), -20.0, 20.0));
#endif
            score = dot;
        }
        let m_new = max(m, reduce_max(lid, score));
        let alpha = exp(m - m_new);
        var p = 0.0;
        if (j < end) {
            p = exp(score - m_new);
        }
        p_sh[lid] = p;
        l = l * alpha + p;
        m = m_new;
        workgroupBarrier();
        let count = min(WG, end - c0);
        for (var k = 0u; k < DPT; k++) {
            let c = lid + k * WG;
            if (c < D4()) {
                var a = acc[k] * alpha;
                for (var jj = 0u; jj < count; jj++) {
                    a += p_sh[jj] * present_v[(kv + c0 + jj) * D4() + c];
                }
                acc[k] = a;
            }
        }
        workgroupBarrier();
    }
    let denom = reduce_sum(lid, l);
    let inv = select(0.0, 1.0 / denom, denom > 0.0);
    let orow = (b * S() + s) * (H() * D()) + h * D();
    for (var k = 0u; k < DPT; k++) {
        let c = lid + k * WG;
        if (c < D4()) {
            let v = acc[k] * inv;
            for (var e = 0u; e < 4u; e++) {
                output[orow + 4u * c + e] = v[e];
            }
        }
    }
}
