// ScatterND / ScatterElements, after y has been filled with a copy of the data:
// y[dst(i)] = REDUCE(y[dst(i)], upd[...]). Buffers: idx (i32), upd, y. Defs: REDUCE (WGSL over
// `a` (current) and `v` (update)), BODY (generated code computing destinations from i; it loops
// over the updates that may hit the same element so that they apply in order: from the param
// W0 on, at most TRIPS of them, a dispatch per TRIPS), GUARD (the updates the plan's passes
// cover: a walk of WALK (a param call) updates longer than that reports).
#import common::grid
#import indexing::index

fn combine(a: y_t, v: y_t) -> y_t {
    return #{REDUCE};
}

#ifdef TRIPS
const TRIPS: u32 = #{TRIPS}u;
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
#ifdef GUARD
    if (W0() == 0u && i == 0u && #{WALK} > #{GUARD}u) { onyxia_report(); }
#endif
    #{BODY}
}
