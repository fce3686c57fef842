// Split into up to 7 outputs in one dispatch: the mirror of concat.wgsl. x is viewed as
// [outer, IN_ROW]; output k as [outer, R_k] taken from column GROUP_OFF + E_(k-1) (E_k: running
// end column in this group). One thread per element of the group's columns:
// i < N() = outer * GROUP_ROW.
// Buffers: x (raw), y0 .. (raw). Defs: SELECT (generated code writing the element to the
// output that owns column r).
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let o = i / GROUP_ROW();
    let r = i % GROUP_ROW();
    let v = x_load(o * IN_ROW() + GROUP_OFF() + r);
    #{SELECT}
}
