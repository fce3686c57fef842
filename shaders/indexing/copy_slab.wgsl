// Copy x, viewed as [outer, IN_ROW], into y viewed as [outer, OUT_ROW] at column OFFSET.
// Used by Concat (one dispatch per input). Params: N (elements of x), IN_ROW, OUT_ROW, OFFSET.
@group(0) @binding(0) var<storage, read> x: array<#{T}>;
@group(0) @binding(1) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= N()) {
        return;
    }
    let outer = i / IN_ROW();
    let r = i % IN_ROW();
    y[outer * OUT_ROW() + OFFSET() + r] = x[i];
}
