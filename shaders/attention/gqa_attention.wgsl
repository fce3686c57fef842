// GroupQueryAttention, step 2: softmax(q k^T * scale) v over the present KV cache, fused.
//
// One workgroup per (query head h, query row s, batch b): grid (H, S, B). Query head h reads
// KV head h / (H / KVH). Keys are visited with attention::softmax, whose value columns are vec4
// here. Nothing of size total_sequence_length is materialized, so the kernel does not depend
// on it. GPU-type adapters run it (64 threads); CPU-type adapters run gqa_flash.wgsl instead,
// and this kernel (8 threads) only for heads over 128.
//
// Visible keys for row s of batch b: [start, end) with past_b as in gqa_kv.wgsl,
// end = past_b + s + 1 (causal) or seqlens_k[b] + 1, clamped to T; start = end - WINDOW
// when a sliding window is set. Scores are scale * q.k, then softcap * tanh(x / softcap).
// K and V rows are read as vec4 (head sizes are multiples of 8): D4 = D / 4 vectors per row.
// Buffers: query, seqlens, total_len, [cos_cache, sin_cache], [q_norm], present_k, present_v
// (or past_k, past_v, new_k, new_v; the K/V buffers read as vec4), output. Computed in f32
// whatever the storage (fp16 caches are read as fp16).
// WINDOWED (window-sized cache, sliding_window_cache = 1): keys come from past_k/_v (capacity C,
// positions P - L(P) .. P - 1, see attention::window) and from this step's rows new_k/_v (S per
// head) instead of present_k/_v; the window keeps every visible key resident.
// QK_NORM: the query row is RMS-normalized over its head (weight q_norm, epsilon EPS) before rotary.
// ROUND_F16 (float16 models): the normalized and the rotated query are rounded to float16, as
// onnxruntime holds them in float16 tensors between its steps (see attention::rope f16_step).
// Defs: DIM (head size, static), DPT (vec4 columns per thread), ATT_WG (threads, attention::reduce),
// ROTARY, INTERLEAVED,
// CAUSAL, WINDOW, SOFTCAP, QK_NORM, WINDOWED, ROUND_F16.
// SPLIT_KV (attention::split): grid (H, S, B * SPLITS), each split's keys only.
// Params: S, T, H, KVH, D, D4, Q_ROW (elements per token row of query), SCALE, WINDOW_SIZE, CAP,
// HALF, MAXPOS, EPS, C.
#import attention::gqa_rows
#import attention::softmax
#import attention::split

var<workgroup> q_sh: array<f32, #{DIM}>;
var<workgroup> q4: array<vec4<f32>, #{DIM} / 4>;

alias SoftmaxValue = vec4<f32>;

// (softmax_start's `values` offset is unused: key positions map through attention::gqa_rows)
fn softmax_value(kv: u32, key: u32, column: u32) -> vec4<f32> {
    return value4(key, column);
}

fn softmax_store(orow: u32, column: u32, value: vec4<f32>) {
    for (var e = 0u; e < 4u; e++) {
        output_store(orow + 4u * column + e, output_t(value[e]));
    }
}

#ifdef SPLIT_KV
fn softmax_partial_store(out: u32, column: u32, value: vec4<f32>) {
    for (var e = 0u; e < 4u; e++) {
        partial_store(out + 4u * column + e, value[e]);
    }
}
#endif

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let s = wid.y;
    let sp = key_split(wid.z);
    let b = sp.b;
    let g = h / (H() / KVH());
    let total_b = u32(max(seqlens_load(b) + 1, 0));
    let past = past_of(total_b);
    let pos = past + s;
    let keys = visible_keys(pos, total_b);

    // The query row, [normalized,] rotated, with the scale folded in.
    let qrow = (b * S() + s) * Q_ROW() + h * D();
    var q_inv = 1.0;
#ifdef QK_NORM
    var squares = 0.0;
    for (var d = lid; d < D(); d += WG) {
        let x = f32(query_load(qrow + d));
        squares += x * x;
    }
    q_inv = 1.0 / sqrt(reduce_sum(lid, squares) / f32(D()) + EPS());
#endif
    for (var d = lid; d < D(); d += WG) {
        q_sh[d] = query_element(qrow, d, q_inv, pos);
    }
    workgroupBarrier();
    for (var c = lid; c < D4(); c += WG) {
        q4[c] = vec4(q_sh[4u * c], q_sh[4u * c + 1u], q_sh[4u * c + 2u], q_sh[4u * c + 3u]);
    }
    workgroupBarrier();

    gqa_rows_at(b, g, past);
    var st = softmax_start(0u, D4());
    let first = split_lo(sp, keys.x, keys.y);
    let last = split_hi(sp, keys.x, keys.y);
    for (var c0 = first; c0 < last; c0 += WG) {
        let j = c0 + lid;
        var score = NEG;
        if (j < last) {
            var dot4 = vec4(0.0);
            for (var c = 0u; c < D4(); c++) {
                dot4 += q4[c] * key4(j, c);
            }
            var dot = dot4.x + dot4.y + dot4.z + dot4.w;
#ifdef SOFTCAP
            // tanh of a clamped argument: some drivers compute tanh through exp and overflow.
            dot = CAP() * tanh(clamp(dot / CAP(), -20.0, 20.0));
#endif
            score = dot;
        }
        softmax_chunk(&st, lid, c0, last, score, j < last);
    }
#ifdef SPLIT_KV
    if (split_partial()) {
        softmax_partial(st, lid, split_at(sp, (b * H() + h) * S() + s));
        return;
    }
#endif
    softmax_finish(st, lid, (b * S() + s) * (H() * D()) + h * D());
}
