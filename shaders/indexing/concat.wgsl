// Concat of up to 7 inputs in one dispatch. y is viewed as [outer, OUT_ROW]; input k as
// [outer, R_k] placed at column GROUP_OFF + E_(k-1) (E_k: running end column in this group).
// One thread per element of the group's columns: i < N() = outer * GROUP_ROW.
// Buffers: x0 .. (raw), y (raw). Defs: SELECT (generated code picking the input that owns
// column r and copying one element).
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let o = i / GROUP_ROW();
    let r = i % GROUP_ROW();
    let dst = o * OUT_ROW() + GROUP_OFF() + r;
    #{SELECT}
}
