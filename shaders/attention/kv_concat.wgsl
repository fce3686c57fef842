// ONNX Attention: present = concat(past, new) along the sequence axis, in BNSH layout.
// One thread per present element [b, h, t, d] of [B, H, T, D]: rows t < P come from past
// ([B, H, P, D], HAS_PAST), the rest from the new keys/values, which are read through strides
// (3-D [B, S, H * D] and 4-D [B, H, S, D] inputs alike).
// Defs: HAS_PAST. Params: N (elements), T (present rows), P (past rows), H, D, SB, SH, SS
// (element strides of the new tensor's batch, head and sequence axes).
@group(0) @binding(0) var<storage, read> src: array<f32>;
#ifdef HAS_PAST
@group(0) @binding(1) var<storage, read> past: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#else
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= N()) {
        return;
    }
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
