// Data movement by index arithmetic: y[dst] = x[src] for every flat index i < N().
// Transpose, Slice, Expand, Tile, Pad, Trilu, Gather, GatherElements and GatherND all use it;
// only the generated INDEX code differs (see onyxia/operators/indexing.py).
// Defs: T (storage type of x and y); INDEX (WGSL computing `src` and `dst` from i and, with
// MASKED, `inside`; it may read `idx`); HAS_IDX (bind the i32 buffer `idx` at 1); MASKED
// (where `inside` is false y takes FILL: the param FILL() or, with FILL_BUFFER, fill_value[0]);
// B_FILL, B_Y (binding numbers). Indices are u32 and wrap mod 2^32, so negative strides
// (reversed slices) work as two's complement.
#import common::grid
#import indexing::index

@group(0) @binding(0) var<storage, read> x: array<#{T}>;
#ifdef HAS_IDX
@group(0) @binding(1) var<storage, read> idx: array<i32>;
#endif
#ifdef FILL_BUFFER
@group(0) @binding(#{B_FILL}) var<storage, read> fill_value: array<#{T}>;
#endif
@group(0) @binding(#{B_Y}) var<storage, read_write> y: array<#{T}>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    #{INDEX}
#ifdef MASKED
#ifdef FILL_BUFFER
    let fill = fill_value[0];
#else
    let fill = #{T}(FILL());
#endif
    // `src` is clamped by the INDEX code where `inside` is false, so the read stays in bounds.
    y[dst] = select(fill, x[src], inside);
#else
    y[dst] = x[src];
#endif
}
