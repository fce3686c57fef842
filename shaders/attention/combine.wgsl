// Split-KV attention, step 2: merges the SPLITS partial softmax states of each query row
// (attention::split) into the output: m = max m_i, l = sum l_i exp(m_i - m),
// y = sum acc_i exp(m_i - m) / l (zeros for a row without a live key). One thread per output
// element; it loops over the splits (SPLITS <= keys / KPS: a KV binding of at most 128 MiB keeps
// that far below the loop cap).
// Buffers: partial (f32), y. Params: N (rows x COLS), H, S, COLS, SPLITS, YB/YH/YS (the output's
// batch, head and sequence strides, in elements).
#import common::grid

const NEG = -3.0e38;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) {
        return;
    }
    let c = i % COLS();
    let row = i / COLS();
    let s = row % S();
    let h = (row / S()) % H();
    let b = row / (S() * H());
    let stride = COLS() + 2u;
    let first = row * SPLITS() * stride;
    var m = NEG;
    for (var k = 0u; k < SPLITS(); k++) {
        m = max(m, partial_load(first + k * stride));
    }
    var l = 0.0;
    var acc = 0.0;
    for (var k = 0u; k < SPLITS(); k++) {
        let at = first + k * stride;
        let w = exp(partial_load(at) - m);
        l += partial_load(at + 1u) * w;
        acc += partial_load(at + 2u + c) * w;
    }
    y_store(b * YB() + h * YH() + s * YS() + c, y_t(select(0.0, acc / l, l > 0.0)));
}
