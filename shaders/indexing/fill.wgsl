// y[i] = START() (+ i * DELTA() with RANGE): ConstantOfShape, Dropout's mask, and Range over
// symbolic sizes. Without RANGE, y is raw and START() its storage code. y is written whole
// words at a time. Defs: RANGE. Params: N (element count), START, DELTA.
#import common::grid

fn value(i: u32) -> y_t {
#ifdef RANGE
    return START() + y_t(i) * DELTA();
#else
    return START();
#endif
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let u = grid_thread(wg);
    if (u * y_lanes >= N()) { return; }
    var v: array<y_t, y_lanes>;
    for (var l = 0u; l < y_lanes; l++) {
        let i = u * y_lanes + l;
        if (i < N()) {
            v[l] = value(i);
        }
    }
    y_store_unit(u, v);
}
