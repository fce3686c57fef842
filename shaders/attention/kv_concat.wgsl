// ONNX Attention: present = concat(past, new) along the sequence axis, in BNSH layout.
// One thread per present element [b, h, t, d] of [B, H, T, D]: rows t < P come from past
// ([B, H, P, D], HAS_PAST), the rest from the new keys/values, which are read through strides
// (3-D [B, S, H * D] and 4-D [B, H, S, D] inputs alike).
// Defs: HAS_PAST. Params: N (elements), T (present rows), P (past rows), H, D, SB, SH, SS
// (element strides of the new tensor's batch, head and sequence axes).
#import common::grid

@group(0) @binding(0) var<storage, read> src: array<f32>;
#ifdef HAS_PAST
@group(0) @binding(1) var<storage, read> past: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#else
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let d = i % D();
    let t = (i / D()) % T();
    let bh = i / (D() * T());
#ifdef HAS_PAST
    if (t < P()) {
        dst[i] = past[(bh * P() + t) * D() + d];
        return;
    }
#endif
    dst[i] = src[(bh / H()) * SB() + (bh % H()) * SH() + (t - P()) * SS() + d];
}
