// Elementwise map over 1-3 inputs with NumPy broadcasting: y[i] = EXPR(x0, x1, x2).
// Defs: NIN (number of inputs), T0..T2 and TY (storage scalar types), C0..C2 (types the
// inputs are converted to), EXPR (WGSL expression over x0, x1, x2), INDEX (generated
// code defining idx_x0.. from the flat output index i).
// Params: N (output element count) plus the dims/strides the INDEX code reads.
@group(0) @binding(0) var<storage, read> in0: array<#{T0}>;
#if NIN >= 2
@group(0) @binding(1) var<storage, read> in1: array<#{T1}>;
#endif
#if NIN >= 3
@group(0) @binding(2) var<storage, read> in2: array<#{T2}>;
#endif
@group(0) @binding(#{NIN}) var<storage, read_write> y: array<#{TY}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= N()) {
        return;
    }
    #{INDEX}
    let x0 = #{C0}(in0[idx_x0]);
#if NIN >= 2
    let x1 = #{C1}(in1[idx_x1]);
#endif
#if NIN >= 3
    let x2 = #{C2}(in2[idx_x2]);
#endif
    y[i] = #{TY}(#{EXPR});
}
