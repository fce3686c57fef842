#define_import_path quantized::nbits

// 4-bit weight access for MatMulNBits / GatherBlockQuantized. The packed uint8 tensors `b`
// (weights) and `zp` (zero points) normally arrive re-viewed as 32-bit words (4 bytes each,
// little-endian; PackNBitsWeightsPass). With B_BYTES / ZP_BYTES the buffer instead holds one
// byte per 32-bit element (the generic uint8 upload) and words are assembled from 4 reads.
// Defs: B_BYTES, ZP_BYTES, ZP_PACKED (uint8 4-bit zero points), ZP_FLOAT (float zero points).
// Params used: NBLK (blocks per row), ZP_ROW (packed zero-point bytes per row).

fn b_word(w: u32) -> u32 {
#ifdef B_BYTES
    let i = 4u * w;
    return b[i] | (b[i + 1u] << 8u) | (b[i + 2u] << 16u) | (b[i + 3u] << 24u);
#else
    return b[w];
#endif
}

fn b_byte(i: u32) -> u32 {
#ifdef B_BYTES
    return b[i];
#else
    return (b[i / 4u] >> ((i % 4u) * 8u)) & 255u;
#endif
}

// Zero point of block `blk` of row `row`; 8 (2^(bits-1)) when the model gives none.
fn zero_point(row: u32, blk: u32) -> f32 {
#ifdef ZP_PACKED
    let i = row * ZP_ROW() + blk / 2u;
#ifdef ZP_BYTES
    let byte = zp[i];
#else
    let byte = (zp[i / 4u] >> ((i % 4u) * 8u)) & 255u;
#endif
    return f32((byte >> ((blk % 2u) * 4u)) & 15u);
#else
#ifdef ZP_FLOAT
    return zp[row * NBLK() + blk];
#else
    return 8.0;
#endif
#endif
}
