// ONNX Attention (opset 23+): softmax(softcap(scale * q k^T) + bias) v, fused, one workgroup per
// (query head h, query row s, batch b): grid (H, S, B). Query head h reads KV head h / GROUP.
// Keys are visited with attention::softmax (one key per thread, lanes own DPT output columns).
//
// A key j < T is allowed when lo <= j < hi (causal: j <= pos; window: pos - LEFT <= j <=
// pos + RIGHT; nonpad: j < nonpad[b]; pos = s + offset, offset = P with a past cache,
// nonpad[b] - S with nonpad_kv_seqlen, else 0) and the mask allows it (bool: true; float: not
// -inf; keys past the mask's last dim MT are masked). Its score is capped + mask value. A row
// with no allowed key outputs zeros (l = 0), never NaN.
// QK_OUT writes the optional qk_matmul_output [B, H, S, T] row: MODE 0 raw scaled q.k, 1 after
// softcap, 2 after the bias (-inf where masked), 3 the softmax probabilities (the raw scores are
// stored during the walk and normalized by the same thread afterwards).
// Buffers: q, k, v, [mask], [nonpad], y, [qk]; computed in f32.
// Defs: DIM (head size), DPT, ATT_WG (threads, attention::reduce; default 64), CAUSAL,
// LEFT_WINDOW, RIGHT_WINDOW, NONPAD, MASK_BOOL, MASK_FLOAT, SOFTCAP, QK_OUT, MODE.
// SPLIT_KV (attention::split, not with QK_OUT): grid (H, S, B * SPLITS), each split's keys only.
// Params: H, S, T, D, DV, GROUP, SCALE, CAP, P, LEFT, RIGHT, MT; element strides QB/QH/QS,
// KB/KH/KS, VB/VH/VS, YB/YH/YS and MB/MH/MS (mask: 0 on broadcast axes); with OFFSETS (a def)
// Q0, K0, V0 (FusedAttention's views into one fused projection's output).

#import attention::softmax
#import attention::split
#import attention::operands


var<workgroup> q_sh: array<f32, #{DIM}>;

alias SoftmaxValue = f32;

fn softmax_value(vbase: u32, key: u32, column: u32) -> f32 {
    return f32(v_load(vbase + key * VS() + column));
}

fn softmax_store(yrow: u32, column: u32, value: f32) {
    y_store(yrow + column, y_t(value));
}

#ifdef SPLIT_KV
fn softmax_partial_store(out: u32, column: u32, value: f32) {
    partial_store(out + column, value);
}
#endif

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let s = wid.y;
    let sp = key_split(wid.z);
    let b = sp.b;
    let g = h / GROUP();

    // The allowed key range [lo, hi) from the causal frontier, the window and the padding.
#ifdef NONPAD
    let offset = nonpad_load(b) - i32(S());
#else
    let offset = i32(P());
#endif
    let pos = i32(s) + offset;
    var lo = 0;
    var hi = i32(T());
#ifdef CAUSAL
    hi = min(hi, pos + 1);
#endif
#ifdef LEFT_WINDOW
    lo = max(lo, pos - i32(LEFT()));
#endif
#ifdef RIGHT_WINDOW
    hi = min(hi, pos + i32(RIGHT()) + 1);
#endif
#ifdef NONPAD
    hi = min(hi, nonpad_load(b));
#endif
#ifdef QK_OUT
    // Every score is written, allowed or not.
    let j0 = 0u;
    let j1 = T();
#else
    let j0 = split_lo(sp, u32(max(lo, 0)), u32(max(hi, 0)));
    let j1 = split_hi(sp, u32(max(lo, 0)), u32(max(hi, 0)));
#endif

    let offs = operand_offsets();
    let qrow = b * QB() + h * QH() + s * QS() + offs.x;
    for (var d = lid; d < D(); d += WG) {
        q_sh[d] = f32(q_load(qrow + d)) * SCALE();
    }
    workgroupBarrier();

    let kbase = b * KB() + g * KH() + offs.y;
    let vbase = b * VB() + g * VH() + offs.z;
    let mrow = b * MB() + h * MH() + s * MS();
    let qkrow = ((b * H() + h) * S() + s) * T();
    var st = softmax_start(vbase, DV());
    for (var c0 = j0; c0 < j1; c0 += WG) {
        let j = c0 + lid;
        var score = NEG;
        var ok = false;
        if (j < j1) {
            let krow = kbase + j * KS();
            var dot = 0.0;
            for (var d = 0u; d < D(); d++) {
                dot += q_sh[d] * f32(k_load(krow + d));
            }
            var capped = dot;
#ifdef SOFTCAP
            // tanh of a clamped argument: some drivers compute tanh through exp and overflow.
            capped = CAP() * tanh(clamp(dot / CAP(), -20.0, 20.0));
#endif
            var bias = 0.0;
            ok = i32(j) >= lo && i32(j) < hi;
#ifdef MASK_BOOL
            ok = ok && j < MT() && mask_load(mrow + j) != 0u;
#endif
#ifdef MASK_FLOAT
            if (j < MT()) {
                bias = f32(mask_load(mrow + j));
                ok = ok && bias > NEG;  // a -inf entry disallows the key
            } else {
                ok = false;
            }
#endif
            if (ok) {
                score = capped + bias;
            }
#ifdef QK_OUT
            let neg_inf = bitcast<f32>(0xff800000u);
#if MODE == 0
            qk_store(qkrow + j, qk_t(dot));
#else if MODE == 1
            qk_store(qkrow + j, qk_t(capped));
#else if MODE == 2
            qk_store(qkrow + j, qk_t(select(neg_inf, capped + bias, ok)));
#else
            qk_store(qkrow + j, qk_t(select(neg_inf, score, ok)));
#endif
#endif
        }
        softmax_chunk(&st, lid, c0, j1, score, ok);
    }
#ifdef SPLIT_KV
    if (split_partial()) {
        softmax_partial(st, lid, split_at(sp, (b * H() + h) * S() + s));
        return;
    }
#endif
    let inv = softmax_finish(st, lid, b * YB() + h * YH() + s * YS());
#ifdef QK_OUT
#if MODE == 3
    // Probabilities: this thread normalizes exactly the entries it stored above.
    for (var j = lid; j < T(); j += WG) {
        let score = f32(qk_load(qkrow + j));
        qk_store(qkrow + j, qk_t(select(0.0, exp(score - st.m) * inv, score > NEG)));
    }
#endif
#endif
}
