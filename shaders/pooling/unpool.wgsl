// MaxUnpool's scatter (the output was zero-filled first): y[indices[i]] = x[i]. Indices out of
// range are skipped. Buffers: x, indices, y. Params: N (input elements), TOTAL (output elements).
#import common::grid


@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let j = u32(indices_load(i));  // a negative index wraps to a huge u32: skipped below
    if (j < TOTAL()) {
        y_store(j, x_load(i));
    }
}
