// Batched matrix product y[b] = a[b] @ b[b] with 16x16 shared-memory tiles.
// Params: M, N, K and the batch index code's dims/strides. Defs: T, INDEX (maps batch `i`
// to idx_a / idx_b, the broadcast batch of each operand).
@group(0) @binding(0) var<storage, read> a: array<#{T}>;
@group(0) @binding(1) var<storage, read> b: array<#{T}>;
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;

var<workgroup> ta: array<array<#{T}, 16>, 16>;
var<workgroup> tb: array<array<#{T}, 16>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = wid.z;
    #{INDEX}
    let a_base = idx_x0 * M() * K();
    let b_base = idx_x1 * K() * N();
    let row = wid.y * 16u + lid.y;
    let col = wid.x * 16u + lid.x;
    var acc = #{T}(0);
    let tiles = (K() + 15u) / 16u;
    for (var t = 0u; t < tiles; t++) {
        let ka = t * 16u + lid.x;
        let kb = t * 16u + lid.y;
        var va = #{T}(0);
        if (row < M() && ka < K()) {
            va = a[a_base + row * K() + ka];
        }
        var vb = #{T}(0);
        if (kb < K() && col < N()) {
            vb = b[b_base + kb * N() + col];
        }
        ta[lid.y][lid.x] = va;
        tb[lid.y][lid.x] = vb;
        workgroupBarrier();
        for (var k = 0u; k < 16u; k++) {
            acc += ta[lid.y][k] * tb[k][lid.x];
        }
        workgroupBarrier();
    }
    if (row < M() && col < N()) {
        y[(i * M() + row) * N() + col] = acc;
    }
}
