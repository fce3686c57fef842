// Einsum, general form: y[i] = sum over r < RED of prod_k x_k[off_k(i, r)], one thread per output
// element. The generated BASE code decomposes i into the output labels' coordinates and sets
// off<k> (operand k's offset of those coordinates); SAVE keeps them as base<k>; OFFSETS adds the
// summed labels' coordinates of r. Repeated labels (diagonals) have summed strides, broadcast
// dims stride 0 (see onyxia/operators/linalg/linalg.py).
// Buffers: x0 .., y. Defs: T (the compute type and accumulator), BASE, SAVE, OFFSETS, ACC (acc
// plus the product of the operands' elements; checked for int64). Params: COUNT (outputs), RED (terms per output)
// and the dims / strides the generated code reads.
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
#ifdef CHUNK
    // A sum longer than one invocation may loop over (lavapipe stops an invocation's loops
    // after ~65,535 iterations): thread t sums terms [part * CHUNK, ...) of output t % COUNT
    // into y[t] (partials [PARTS, COUNT], reduced by the next dispatch).
    let t = grid_thread(wg);
    if (t >= COUNT() * PARTS()) { return; }
    let i = t % COUNT();
    let first = (t / COUNT()) * #{CHUNK}u;
    let last = min(RED(), first + #{CHUNK}u);
#else
    let i = grid_thread(wg);
    if (i >= COUNT()) { return; }
    let t = i;
    let first = 0u;
    let last = RED();
#endif
    #{BASE}
    #{SAVE}
    var acc = #{T}(0);
    for (var r = first; r < last; r++) {
        #{OFFSETS}
        acc = #{ACC};
    }
    y_store(t, y_t(acc));
}
