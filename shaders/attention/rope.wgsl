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
