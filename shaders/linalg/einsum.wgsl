// Einsum, general form: y[i] = sum over r < RED of prod_k x_k[off_k(i, r)], one thread per output
// element. The generated BASE code decomposes i into the output labels' coordinates and sets
// off<k> (operand k's offset of those coordinates); SAVE keeps them as base<k>; OFFSETS adds the
// summed labels' coordinates of r. Repeated labels (diagonals) have summed strides, broadcast
// dims stride 0 (see onyxia/operators/linalg.py).
// Buffers: x0 .., y. Defs: T (the compute type and accumulator), BASE, SAVE, OFFSETS, ACC (acc
// plus the product of the operands' elements; checked for int64). Params: COUNT (outputs), RED (terms per output)
// and the dims / strides the generated code reads.
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= COUNT()) { return; }
    #{BASE}
    #{SAVE}
    var acc = #{T}(0);
    for (var r = 0u; r < RED(); r++) {
        #{OFFSETS}
        acc = #{ACC};
    }
    y_store(i, y_t(acc));
}
