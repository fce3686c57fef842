// Gather along one axis: y[outer, j, inner] = data[outer, idx[j] (negative wraps), inner].
// Params: N (output elements), INNER (elements after the axis), NIDX (index count),
// AXIS_DIM (data size along the axis). Defs: T (storage type of data and y).
@group(0) @binding(0) var<storage, read> data: array<#{T}>;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= N()) {
        return;
    }
    let inner = i % INNER();
    let j = (i / INNER()) % NIDX();
    let outer = i / (INNER() * NIDX());
    var k = idx[j];
    if (k < 0) {
        k += i32(AXIS_DIM());
    }
    // Out-of-range indices are undefined in ONNX; clamp so the read stays in bounds.
    let kk = min(u32(max(k, 0)), AXIS_DIM() - 1u);
    y[i] = data[(outer * AXIS_DIM() + kk) * INNER() + inner];
}
