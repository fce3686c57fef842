// Split into up to 7 outputs in one dispatch: the mirror of concat.wgsl. x is viewed as
// [outer, IN_ROW]; output k as [outer, R_k] taken from column GROUP_OFF + E_(k-1) (E_k: running
// end column in this group). One thread per element of the group's columns:
// i < N() = outer * GROUP_ROW; with QUADS (as concat.wgsl's) one per 4, moved as a vec4.
// Buffers: x (raw), y0 .. (raw). Defs: SELECT (generated code writing the element, or with
// QUADS the quad, to the output that owns column r), QUADS.
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
#ifdef QUADS
    let o = i / (GROUP_ROW() / 4u);
    let r = 4u * (i % (GROUP_ROW() / 4u));
    let v = x_load4((o * IN_ROW() + GROUP_OFF() + r) / 4u);
#else
    let o = i / GROUP_ROW();
    let r = i % GROUP_ROW();
    let v = x_load(o * IN_ROW() + GROUP_OFF() + r);
#endif
    #{SELECT}
}
