// Einsum, general form: y[i] = sum over r < RED of prod_k x_k[off_k(i, r)], one thread per output
// element. The generated BASE code decomposes i into the output labels' coordinates and sets
// off<k> (operand k's offset of those coordinates); SAVE keeps them as base<k>; OFFSETS adds the
// summed labels' coordinates of r. Repeated labels (diagonals) have summed strides, broadcast
// dims stride 0 (see onyxia/operators/linalg.py).
// Defs: T (storage and accumulator type), BINDINGS (x0.. read-only, y), BASE, SAVE, OFFSETS,
// TERM (the product of the operands' elements). Params: COUNT (outputs), RED (terms per output)
// and the dims / strides the generated code reads.
#{BINDINGS}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= COUNT()) {
        return;
    }
    #{BASE}
    #{SAVE}
    var acc = #{T}(0);
    for (var r = 0u; r < RED(); r++) {
        #{OFFSETS}
        acc += #{TERM};
    }
    y[i] = acc;
}
