// Elementwise map, four consecutive outputs per thread (operators/elementwise/map_kernel.py
// plans it where the innermost broadcast axis is a multiple of 4 long, so the four share every
// other coordinate): an operand contiguous along that axis is read as one vec4, one constant
// along it as one scalar, and y is written as a vec4. On llvmpipe each lane's storage access is
// a separate load, so this is 4x fewer of them than map.wgsl's one element per thread (a
// broadcast multiply over 131k floats: ~3x faster). The expression stays scalar: LANES repeats
// it per lane.
// Buffers: in0 .. in{NIN-1} (vec4-read ones declared vector), y (vector). Defs: INDEX (idx_x0,
// ... of the first of the four outputs, from i), VLOADS, LANES (each lane's `let xk = ...`, the
// expression's statements, then `out[l] = ...`). Params: N (output elements, a multiple of 4),
// the dims/strides INDEX reads, and any the expression uses.
#import common::grid
#import elementwise::math

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let u = grid_thread(wg);
    if (4u * u >= N()) { return; }
    let i = 4u * u;
    #{INDEX}
    #{VLOADS}
    var out: vec4<y_t>;
    #{LANES}
    y_store4(u, out);
}
