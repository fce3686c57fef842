// Inference BatchNormalization: y = (x - mean[c]) / sqrt(var[c] + EPS) * scale[c] + bias[c]
// with c = (i / INNER) % C (INNER = 1, C = all non-batch elements for per-activation params).
// Params: TOTAL, INNER, C, EPS.
#import common::grid

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> scale: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> variance: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    let c = (i / INNER()) % C();
    let a = scale[c] / sqrt(variance[c] + EPS());
    y[i] = (x[i] - mean[c]) * a + bias[c];
}
