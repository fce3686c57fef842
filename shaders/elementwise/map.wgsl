// Elementwise map over NIN inputs with NumPy broadcasting: y[i] = EXPR(x0, x1, ...).
// Buffers (operators/elementwise/map_kernel.py): in0 .. in{NIN-1}, y (written whole words at a time: a
// thread computes the y_lanes elements of one word of a packed output, so no two threads share
// a word). Defs: INDEX (code defining idx_x0, idx_x1, ... from the flat output index i), LOADS
// (`let xk = Ck(ink_load(idx_xk));` in the type each input computes in, then any statements
// the expression needs), EXPR. Params: N (output element count), the dims/strides INDEX reads,
// and any the expression uses.
#import common::grid
#import elementwise::math

fn value(i: u32) -> y_t {
    #{INDEX}
    #{LOADS}
    return y_t(#{EXPR});
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
