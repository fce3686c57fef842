// The last sequence position of each batch row of logits [B, S, V]: copies that row to
// `last` [B, V] and writes its argmax (first index of the maximum, as numpy) to `token` [B].
// One workgroup per batch row; WG threads stride over the vocabulary, then a tree reduction
// in workgroup memory. WG 256, or 8 on a CPU-type adapter: lavapipe runs a workgroup 8
// threads at a time and each barrier switches between those batches (8 barriers over 32
// batches cost a decode step ~0.1 ms on a 2-core VM). A thread's loop runs V / WG times
// (V <= 2^19 keeps WG 8 under lavapipe's ~65,535-iteration cut; the planner checks).
// Buffers: logits, last, token (compared in f32). Defs: WG.
// Params: S (sequence length, dynamic), V (vocabulary size).

const WG = #{WG}u;

var<workgroup> best_value: array<f32, WG>;
var<workgroup> best_index: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.x;
    let src = (b * S() + S() - 1u) * V();
    var value = bitcast<f32>(0xff7fffffu);  // -FLT_MAX (its decimal form rounds past f32 for Tint)
    var index = 0xffffffffu;
    for (var j = lid; j < V(); j += WG) {
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
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
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
