#define_import_path attention::gqa_rows
#import attention::rope
#import attention::window

// Where the GroupQueryAttention kernels find key/value position j of one (batch, KV head), and
// the query elements they read. gqa_rows_at sets the private bases from the batch's past length;
// key4 / value4 then read vec4 c of position j's row (D4 = D / 4 vec4s per row).
// WINDOWED (window-sized cache): positions before this step live in past_k/_v (capacity C,
// position P - L(P) at row 0, see attention::window), this step's S rows in new_k/_v; otherwise
// every position is a row of present_k/_v (T rows per head).

var<private> kv_base: u32;  // first row of this KV head in present (or past, when WINDOWED)
var<private> new_base: u32;  // WINDOWED: first row of this KV head in new_k / new_v
var<private> win_past: u32;  // WINDOWED: positions cached before this step (P)
var<private> win_shift: u32;  // WINDOWED: P - L(P), the position of past row 0

fn gqa_rows_at(b: u32, g: u32, past: u32) {
#ifdef WINDOWED
    kv_base = (b * KVH() + g) * C();
    new_base = (b * KVH() + g) * S();
    win_past = past;
    win_shift = past - resident(past, C(), WINDOW_SIZE());
#else
    kv_base = (b * KVH() + g) * T();
#endif
}

fn key4(j: u32, c: u32) -> vec4<f32> {
#ifdef WINDOWED
    if (j >= win_past) {
        return vec4<f32>(new_k_load4((new_base + j - win_past) * D4() + c));
    }
    return vec4<f32>(past_k_load4((kv_base + j - win_shift) * D4() + c));
#else
    return vec4<f32>(present_k_load4((kv_base + j) * D4() + c));
#endif
}

fn value4(j: u32, c: u32) -> vec4<f32> {
#ifdef WINDOWED
    if (j >= win_past) {
        return vec4<f32>(new_v_load4((new_base + j - win_past) * D4() + c));
    }
    return vec4<f32>(past_v_load4((kv_base + j - win_shift) * D4() + c));
#else
    return vec4<f32>(present_v_load4((kv_base + j) * D4() + c));
#endif
}

// Element e of the query row at `base`, normalized when QK_NORM (inv = 1 / rms of the row).
fn query_at(base: u32, e: u32, inv: f32) -> f32 {
#ifdef QK_NORM
    return f16_step(f32(query_load(base + e)) * inv * f32(q_norm_load(e)));
#else
    return f32(query_load(base + e));
#endif
}

// Element d of the query row at `base` as the kernels use it: [normalized,] rotated at `pos`,
// [rounded to float16,] times the scale.
fn query_element(base: u32, d: u32, inv: f32, pos: u32) -> f32 {
    var q = query_at(base, d, inv);
#ifdef ROTARY
    let rp = rope_pair(d, HALF());
    if (rp.rotated) {
        q = rope_rotate(q, query_at(base, rp.partner, inv), pos, rp);
    }
#endif
    return f16_step(q) * SCALE();
}

// The keys row s (at position pos) of batch b sees: [x, y) (total_b = seqlens_k[b] + 1).
fn visible_keys(pos: u32, total_b: u32) -> vec2<u32> {
#ifdef WINDOWED
    let end = pos + 1u;  // causal (onnxruntime requires it with a window)
#else
#ifdef CAUSAL
    let end = min(pos + 1u, T());
#else
    let end = min(total_b, T());
#endif
#endif
    var start = 0u;
#ifdef WINDOW
    if (end > WINDOW_SIZE()) {
        start = end - WINDOW_SIZE();
    }
#endif
    return vec2(start, end);
}

// Positions cached before this step for batch b (0 for a first prompt: S == total_sequence_length).
fn past_of(total_b: u32) -> u32 {
    if (i32(S()) == total_len_load(0u)) {
        return 0u;
    }
    return u32(max(i32(total_b) - i32(S()), 0));
}
