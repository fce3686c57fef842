#define_import_path quantized::nbits

// 4-bit weight access for MatMulNBits / GatherBlockQuantized. The packed uint8 tensors `b`
// (weights) and `zp` (zero points) are stored as they are (4 bytes to a word): the kernels read
// whole words with b_word(w) and single bytes with b_code(i) / zp_code(i), accessors the buffer
// declarations provide. Defs: ZP_PACKED (uint8 4-bit zero points), ZP_FLOAT (float zero points).
// Params used: NBLK (blocks per row), ZP_ROW (packed zero-point bytes per row).

// Zero point of block `blk` of row `row`; 8 (2^(bits-1)) when the model gives none.
fn zero_point(row: u32, blk: u32) -> f32 {
#ifdef ZP_PACKED
    let byte = zp_code(row * ZP_ROW() + blk / 2u);
    return f32((byte >> ((blk % 2u) * 4u)) & 15u);
#else
#ifdef ZP_FLOAT
    return f32(zp_load(row * NBLK() + blk));
#else
    return 8.0;
#endif
#endif
}
