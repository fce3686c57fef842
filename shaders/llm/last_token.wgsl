// The last sequence position of each batch row of logits [B, S, V]: copies that row to
// `last` [B, V] and writes its argmax (first index of the maximum, as numpy) to `token` [B].
// One workgroup per batch row; 256 threads stride over the vocabulary, then a tree reduction
// in workgroup memory. Buffers: logits, last, token (compared in f32).
// Params: S (sequence length, dynamic), V (vocabulary size).

var<workgroup> best_value: array<f32, 256>;
var<workgroup> best_index: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.x;
    let src = (b * S() + S() - 1u) * V();
    var value = -3.4028235e38f;
    var index = 0xffffffffu;
    for (var j = lid; j < V(); j += 256u) {
        let x = f32(logits_load(src + j));
        last_store(b * V() + j, last_t(x));
        // Strictly greater: within a thread, j grows, so the first maximum wins.
        if (x > value || index == 0xffffffffu) {
            value = x;
            index = j;
        }
    }
    best_value[lid] = value;
    best_index[lid] = index;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            let v = best_value[lid + stride];
            let k = best_index[lid + stride];
            // Ties go to the smaller index; threads that saw nothing hold index 0xffffffff.
            let mine = best_index[lid];
            let better = v > best_value[lid] || (v == best_value[lid] && k < mine);
            if (k != 0xffffffffu && (mine == 0xffffffffu || better)) {
                best_value[lid] = v;
                best_index[lid] = k;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        token_store(b, token_t(best_index[0]));
    }
}
