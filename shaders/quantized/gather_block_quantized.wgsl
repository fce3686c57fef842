// GatherBlockQuantized (4-bit uint8 data, gather_axis 0, quantized along the last axis): the
// embedding lookup of int4 models, dequantized on the GPU. One thread per output element:
//   y[j, r] = (q[idx[j], r] - zero_point) * scale[idx[j], r / BLOCK]
// where q is the data viewed as [rows, R] 4-bit values (two per byte, low nibble first) and
// the quantized axis (length QDIM) is innermost. Out-of-range indices give zeros (onnxruntime).
// Buffers: b (the data), idx, scales, [zp], y. Defs: ZP_PACKED.
// Params: N (output elements), R (values per gathered row), ROWS (data dim 0), QDIM, NBLK,
// BLOCK, ZP_ROW.
#import common::grid
#import quantized::nbits

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let r = i % R();
    var k = idx_load(i / R());
    if (k < 0) {
        k += i32(ROWS());
    }
    if (k < 0 || k >= i32(ROWS())) {
        y_store(i, y_t(0.0));
        return;
    }
    let e = u32(k) * R() + r;
    let q = (b_code(e / 2u) >> ((e % 2u) * 4u)) & 15u;
    let row = e / QDIM();
    let blk = (e % QDIM()) / BLOCK();
    y_store(i, y_t((f32(q) - zero_point(row, blk)) * f32(scales_load(row * NBLK() + blk))));
}
