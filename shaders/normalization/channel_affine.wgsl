// Inference BatchNormalization: y = (x - mean[c]) / sqrt(var[c] + EPS) * scale[c] + bias[c]
// with c = (i / INNER) % C (INNER = 1, C = all non-batch elements for per-activation params).
// Buffers: x, scale, bias, mean, variance, y (computed in f32). Params: TOTAL, INNER, C, EPS.
#import common::grid


@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    let c = (i / INNER()) % C();
    let a = f32(scale_load(c)) / sqrt(f32(variance_load(c)) + EPS());
    y_store(i, y_t((f32(x_load(i)) - f32(mean_load(c))) * a + f32(bias_load(c))));
}
