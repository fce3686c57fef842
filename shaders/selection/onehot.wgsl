// OneHot: y[outer, d, inner] = values[1] if d == indices[outer, inner] (negative indices wrap
// once by DEPTH; anything else out of range matches nothing), else values[0].
// Buffers: indices (float indices are compared as floats, so 2.5 matches nothing, as in
// onnxruntime), values, y. Params: COUNT (output elements), DEPTH, INNER (elements after the new axis).
#import common::grid


@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= COUNT()) { return; }
    let inner = i % INNER();
    let t = i / INNER();
    let d = t % DEPTH();
    let outer = t / DEPTH();
    var idx = indices_load(outer * INNER() + inner);
    if (idx < indices_t(0)) {
        idx += indices_t(DEPTH());
    }
    y_store(i, select(values_load(0u), values_load(1u), idx == indices_t(d)));
}
