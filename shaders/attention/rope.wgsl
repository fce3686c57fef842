#define_import_path attention::rope

// Rotary position embedding (RoPE) index arithmetic shared by RotaryEmbedding and
// GroupQueryAttention. Element d of a head is rotated with its partner element:
//   out[d] = x[d] * cos[pos, col] + sign * x[partner] * sin[pos, col]
// for d < 2 * half (the rotary dim); elements past it pass through (partial rotary).
// Def INTERLEAVED: pairs are (2i, 2i+1) instead of (i, i + half).

struct RopePair {
    partner: u32,
    col: u32,  // column of the cos/sin caches ([max_pos, half])
    sign: f32,
    rotated: bool,
}

fn rope_pair(d: u32, half: u32) -> RopePair {
    if (d >= 2u * half) {
        return RopePair(d, 0u, 0.0, false);
    }
#ifdef INTERLEAVED
    if (d % 2u == 0u) {
        return RopePair(d + 1u, d / 2u, -1.0, true);
    }
    return RopePair(d - 1u, d / 2u, 1.0, true);
#else
    if (d < half) {
        return RopePair(d + half, d, -1.0, true);
    }
    return RopePair(d - half, d - half, 1.0, true);
#endif
}

#ifdef ROTARY
// GroupQueryAttention's rotary step for element x of a head at position `pos` (clamped to the
// caches' rows), whose partner element (rp.partner) is `partner`; the importer binds cos_cache
// and sin_cache and has the params MAXPOS and HALF.
fn rope_rotate(x: f32, partner: f32, pos: u32, rp: RopePair) -> f32 {
    let c = min(pos, MAXPOS() - 1u) * HALF() + rp.col;
    return x * f32(cos_cache_load(c)) + rp.sign * partner * f32(sin_cache_load(c));
}
#endif

// A float16 model's intermediate value as onnxruntime's CPU kernels hold it: rounded to the
// nearest float16 (ties to even) when ROUND_F16 is defined, unchanged otherwise. Its
// GroupQueryAttention writes the rotated query to a float16 buffer before the Q.K product, and
// the per-head q/k norms are SimplifiedLayerNormalization nodes with float16 outputs; the int8
// activations of MatMulNBits accuracy_level 4 turn these last-bit differences into whole steps.
fn f16_step(x: f32) -> f32 {
#ifdef ROUND_F16
    return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;
#else
    return x;
#endif
}
