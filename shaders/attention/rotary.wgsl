// com.microsoft RotaryEmbedding: y = RoPE(x) per head, one thread per element.
// x is [B, S, NH * D] (BSNH) or, with def BNSH, [B, NH, S, D]. Positions come from
// position_ids [B, S], or with def POS_OFFSET from a 1-element offset: pos = offset + s.
// Buffers: x, position_ids, cos_cache, sin_cache, y (computed in f32).
// Defs: INTERLEAVED, BNSH, POS_OFFSET. Params: N (elements), S, NH, D, HALF (rotary dim / 2),
// MAXPOS (rows of the caches; positions are clamped so reads stay in bounds).
#import common::grid
#import attention::rope

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let d = i % D();
#ifdef BNSH
    let s = (i / D()) % S();
    let b = i / (D() * S() * NH());
#else
    let s = (i / (D() * NH())) % S();
    let b = i / (D() * NH() * S());
#endif
    let rp = rope_pair(d, HALF());
    if (!rp.rotated) {
        y_store(i, y_t(x_load(i)));
        return;
    }
#ifdef POS_OFFSET
    let p = position_ids_load(0u) + i32(s);
#else
    let p = position_ids_load(b * S() + s);
#endif
    let row = u32(clamp(p, 0, i32(MAXPOS()) - 1)) * HALF() + rp.col;
    // The partner sits in the same head row: same flat index shifted by partner - d.
    let partner = i - d + rp.partner;
    let v = f32(x_load(i)) * f32(cos_cache_load(row)) + rp.sign * f32(x_load(partner)) * f32(sin_cache_load(row));
    y_store(i, y_t(v));
}
