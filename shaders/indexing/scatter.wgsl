// ScatterND / ScatterElements, after y has been filled with a copy of the data:
// y[dst(i)] = REDUCE(y[dst(i)], upd[...]). Buffers: idx (i32), upd, y. Defs: REDUCE (WGSL over
// `a` (current) and `v` (update)), BODY (generated code computing destinations from i; it loops
// over the updates that may hit the same element so that they apply in order).
#import common::grid
#import indexing::index

fn combine(a: y_t, v: y_t) -> y_t {
    return #{REDUCE};
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    #{BODY}
}
