// GroupQueryAttention, step 1: write the new keys/values into the present KV cache (BNSH).
//
// For batch b the new rows go to positions [past_b, past_b + S) where, as in onnxruntime,
// past_b = 0 for the first prompt (S == total_sequence_length) and seqlens_k[b] + 1 - S
// otherwise. The new key is rotated (RoPE at position past_b + s) when ROTARY is defined.
//   FULL (growing cache, present is a new buffer of T rows): one thread per present element;
//        rows outside the new range copy past (PAST rows, if HAS_PAST) or become 0.
//   otherwise (shared buffer, present already holds past): one thread per new element.
// Buffers: key_in, value_in (both the packed QKV buffer when packed), seqlens, total_len,
// [cos_cache, sin_cache], [k_norm], [past_k, past_v], present_k, present_v; values computed in
// f32 and stored in the cache's dtype (fp16 caches stay fp16).
// WINDOWED (window-sized cache): the new rows go to a scratch [B, KVH, S, D] bound as present_k/_v;
// gqa_window.wgsl assembles the window from past and them.
// QK_NORM: the new key is RMS-normalized over its head (weight k_norm, epsilon EPS) before rotary;
// with ROUND_F16 (float16 models) the normalized key is rounded to float16 first (f16_step).
// Defs: FULL, HAS_PAST, ROTARY, INTERLEAVED, QK_NORM, WINDOWED, ROUND_F16. Params: N (threads), S, T (present
// rows), PAST (past rows), KVH, D, ROW (elements per token row of key_in), K_OFF, V_OFF
// (offsets of the K / V part within a row), HALF (rotary dim / 2), MAXPOS (cache rows), EPS.
#import common::grid
#import attention::rope

// Element e of the new key row at `base`, normalized when QK_NORM (inv = 1 / rms of the row).
fn key_at(base: u32, e: u32, inv: f32) -> f32 {
#ifdef QK_NORM
    return f16_step(f32(key_in_load(base + e)) * inv * f32(k_norm_load(e)));
#else
    return f32(key_in_load(base + e));
#endif
}

// Where batch b's new rows start in the cache (i32 math: seqlens_k may be anything).
fn past_len(b: u32) -> u32 {
    if (i32(S()) == total_len_load(0u)) {
        return 0u;
    }
    return u32(max(seqlens_load(b) + 1 - i32(S()), 0));
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let d = i % D();
#ifdef FULL
    let t = (i / D()) % T();
    let bh = i / (D() * T());
#else
    let s_new = (i / D()) % S();
    let bh = i / (D() * S());
#endif
    let b = bh / KVH();
    let h = bh % KVH();
    let past = past_len(b);
#ifdef FULL
    if (t < past || t >= past + S()) {
        var k = 0.0;
        var v = 0.0;
#ifdef HAS_PAST
        if (t < PAST()) {
            let src = (bh * PAST() + t) * D() + d;
            k = f32(past_k_load(src));
            v = f32(past_v_load(src));
        }
#endif
        present_k_store(i, present_k_t(k));
        present_v_store(i, present_v_t(v));
        return;
    }
    let s = t - past;
    let dst = i;
#else
    let s = s_new;
    let t = past + s;
#ifdef WINDOWED
    let dst = (bh * S() + s) * D() + d;  // the step's own rows (present_k/_v bind a scratch here)
#else
    if (t >= T()) {
        return;  // beyond the cache capacity: onnxruntime rejects this; never write out of bounds
    }
    let dst = (bh * T() + t) * D() + d;
#endif
#endif
    let row = (b * S() + s) * ROW() + h * D();
    let kbase = row + K_OFF();
    var inv = 1.0;
#ifdef QK_NORM
    var squares = 0.0;
    for (var e = 0u; e < D(); e++) {
        let x = f32(key_in_load(kbase + e));
        squares += x * x;
    }
    inv = 1.0 / sqrt(squares / f32(D()) + EPS());
#endif
    var k = key_at(kbase, d, inv);
#ifdef ROTARY
    let rp = rope_pair(d, HALF());
    if (rp.rotated) {
        k = rope_rotate(k, key_at(kbase, rp.partner, inv), t, rp);
    }
#endif
    present_k_store(dst, present_k_t(k));
    present_v_store(dst, present_v_t(f32(value_in_load(row + V_OFF() + d))));
}
