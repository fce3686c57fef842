// com.microsoft RotaryEmbedding: y = RoPE(x) per head, one thread per element.
// x is [B, S, NH * D] (BSNH) or, with def BNSH, [B, NH, S, D]. Positions come from
// position_ids [B, S], or with def POS_OFFSET from a 1-element offset: pos = offset + s.
// Defs: INTERLEAVED, BNSH, POS_OFFSET. Params: N (elements), S, NH, D, HALF (rotary dim / 2),
// MAXPOS (rows of the caches; positions are clamped so reads stay in bounds).
#import common::grid
#import attention::rope

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> position_ids: array<i32>;
@group(0) @binding(2) var<storage, read> cos_cache: array<f32>;
@group(0) @binding(3) var<storage, read> sin_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

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
        y[i] = x[i];
        return;
    }
#ifdef POS_OFFSET
    let p = position_ids[0] + i32(s);
#else
    let p = position_ids[b * S() + s];
#endif
    let row = u32(clamp(p, 0, i32(MAXPOS()) - 1)) * HALF() + rp.col;
    // The partner sits in the same head row: same flat index shifted by partner - d.
    let partner = i - d + rp.partner;
    y[i] = x[i] * cos_cache[row] + rp.sign * x[partner] * sin_cache[row];
}
