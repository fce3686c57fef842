// Data movement by index arithmetic: y[i] = x[src(i)] for every flat index i < N().
// Transpose, Slice, Expand, Tile, Pad, Trilu, Gather, GatherElements and GatherND all use it;
// only the generated INDEX code differs (see onyxia/operators/indexing/indexing.py). With SCATTER the
// INDEX code also computes `dst` and a thread moves y[dst] = x[src] (TensorScatter).
// Buffers: x, [idx (the i32 indices INDEX may read)], [fill_value], y. x, y and fill_value move
// storage codes (raw), so every dtype copies bit-exactly; y is written whole words at a time.
// With QUADS (a copy of 32-bit elements whose innermost axis is contiguous on both sides, a
// multiple of 4 long, at offsets and strides of whole quads) i, src and N() count quads: a
// thread moves one vec4 (llvmpipe pays per access and lane, nearly whatever its width).
// Defs: INDEX (WGSL computing `src` from i and, with MASKED, `inside`); MASKED (where `inside`
// is false y takes the fill: the param FILL() (a storage code) or, with FILL_BUFFER,
// fill_value[0]). Indices are u32 and wrap mod 2^32, so negative strides (reversed slices)
// work as two's complement.
#import common::grid
#import indexing::index

#ifdef SCATTER
@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    #{INDEX}
    y_store(dst, x_load(src));
}
#else ifdef QUADS
@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    #{INDEX}
    y_store4(i, x_load4(src));
}
#else
fn value(i: u32) -> y_t {
    #{INDEX}
#ifdef MASKED
#ifdef FILL_BUFFER
    let fill = fill_value_load(0u);
#else
    let fill = FILL();
#endif
    // `src` is clamped by the INDEX code where `inside` is false, so the read stays in bounds.
    return select(fill, x_load(src), inside);
#else
    return x_load(src);
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
#endif
