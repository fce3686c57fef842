// y[i] = START() (+ i * DELTA() with RANGE): ConstantOfShape, Dropout's mask, and Range over
// symbolic sizes. Defs: T (storage type), RANGE. Params: N (element count), START, DELTA.
@group(0) @binding(0) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= N()) {
        return;
    }
#ifdef RANGE
    y[i] = START() + #{T}(i) * DELTA();
#else
    y[i] = #{T}(START());
#endif
}
