// Split into up to 7 outputs in one dispatch: the mirror of concat.wgsl. x is viewed as
// [outer, IN_ROW]; output k as [outer, R_k] taken from column GROUP_OFF + E_(k-1) (E_k: running
// end column in this group). One thread per element of the group's columns:
// i < N() = outer * GROUP_ROW.
// Defs: T (storage type), BINDINGS (generated declarations x, y0..), SELECT (generated code
// writing the element to the output that owns column r).
#{BINDINGS}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= N()) {
        return;
    }
    let o = i / GROUP_ROW();
    let r = i % GROUP_ROW();
    let v = x[o * IN_ROW() + GROUP_OFF() + r];
    #{SELECT}
}
