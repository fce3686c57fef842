// Concat of up to 7 inputs in one dispatch. y is viewed as [outer, OUT_ROW]; input k as
// [outer, R_k] placed at column GROUP_OFF + E_(k-1) (E_k: running end column in this group).
// One thread per element of the group's columns: i < N() = outer * GROUP_ROW; with QUADS (32-bit
// elements, every row and offset a multiple of 4) one per 4, moved as a vec4 (llvmpipe pays per
// access and lane, nearly whatever its width): i < N() = outer * GROUP_ROW / 4, `r` and `dst`
// still in elements.
// Buffers: x0 .. (raw), y (raw). Defs: SELECT (generated code picking the input that owns
// column r and copying one element, or with QUADS the quad from there), QUADS.
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
#ifdef QUADS
    let o = i / (GROUP_ROW() / 4u);
    let r = 4u * (i % (GROUP_ROW() / 4u));
#else
    let o = i / GROUP_ROW();
    let r = i % GROUP_ROW();
#endif
    let dst = o * OUT_ROW() + GROUP_OFF() + r;
    #{SELECT}
}
