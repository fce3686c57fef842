// MaxUnpool's scatter (the output was zero-filled first): y[indices[i]] = x[i]. Indices out of
// range are skipped. Defs: T. Params: N (input elements), TOTAL (output elements).
#import common::grid

@group(0) @binding(0) var<storage, read> x: array<#{T}>;
@group(0) @binding(1) var<storage, read> indices: array<i32>;
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let j = u32(indices[i]);  // a negative index wraps to a huge u32: skipped below
    if (j < TOTAL()) {
        y[j] = x[i];
    }
}
