#define_import_path quantized::nbits_index

// Where MatMulNBits' kernels find row n's words of b and block scales: row-major as the model
// stores them, or with def TILED in tiles (compiler/passes/nbits_tiles.py says why).
// Params used: NBLK (blocks per row), ROW_WORDS (words per row of b).

// TILED: a unit is a column's two blocks (8 words of b, 2 scales); the units of 64 columns n =
// 64 g + 8 l + c for block pair p lie together, in the order (g, p, c, l). Unit of (n, p):
fn nbits_unit(n: u32, p: u32) -> u32 {
    return ((n / 64u * (NBLK() / 2u) + p) * 8u + n % 8u) * 8u + (n % 64u) / 8u;
}

// The index of row n's block pair p in b's 8-word units and in scale pairs (NBLK even).
fn pair_index(n: u32, p: u32) -> u32 {
#ifdef TILED
    return nbits_unit(n, p);
#else
    return n * (NBLK() / 2u) + p;
#endif
}

// The index in b's words of word w of row n.
fn b_index(n: u32, w: u32) -> u32 {
#ifdef TILED
    return nbits_unit(n, w / 8u) * 8u + w % 8u;
#else
    return n * ROW_WORDS() + w;
#endif
}

// The index in scales of block blk of row n.
fn scale_index(n: u32, blk: u32) -> u32 {
#ifdef TILED
    return nbits_unit(n, blk / 2u) * 2u + blk % 2u;
#else
    return n * NBLK() + blk;
#endif
}
