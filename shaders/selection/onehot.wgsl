// OneHot: y[outer, d, inner] = values[1] if d == indices[outer, inner] (negative indices wrap
// once by DEPTH; anything else out of range matches nothing), else values[0].
// Defs: TI (indices storage type; float indices are compared as floats, so 2.5 matches nothing,
// as in onnxruntime), T (values type). Params: COUNT (output elements), DEPTH, INNER (elements after the new axis).
#import common::grid

@group(0) @binding(0) var<storage, read> indices: array<#{TI}>;
@group(0) @binding(1) var<storage, read> values: array<#{T}>;
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= COUNT()) { return; }
    let inner = i % INNER();
    let t = i / INNER();
    let d = t % DEPTH();
    let outer = t / DEPTH();
    var idx = indices[outer * INNER() + inner];
    if (idx < #{TI}(0)) {
        idx += #{TI}(DEPTH());
    }
    y[i] = select(values[0], values[1], idx == #{TI}(d));
}
