// ONNX Attention: present = concat(past, new) along the sequence axis, in BNSH layout.
// One thread per present element [b, h, t, d] of [B, H, T, D]: rows t < P come from past
// ([B, H, P, D], HAS_PAST), the rest from the new keys/values, which are read through strides
// (3-D [B, S, H * D] and 4-D [B, H, S, D] inputs alike).
// Buffers: src, [past], dst, all raw (the bits are copied).
// Defs: HAS_PAST. Params: N (elements), T (present rows), P (past rows), H, D, SB, SH, SS
// (element strides of the new tensor's batch, head and sequence axes).
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let d = i % D();
    let t = (i / D()) % T();
    let bh = i / (D() * T());
#ifdef HAS_PAST
    if (t < P()) {
        dst_store(i, past_load((bh * P() + t) * D() + d));
        return;
    }
#endif
    dst_store(i, src_load((bh / H()) * SB() + (bh % H()) * SH() + (t - P()) * SS() + d));
}
