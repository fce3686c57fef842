// GroupQueryAttention with a window-sized cache (sliding_window_cache = 1), step 3: present.
//
// present row r of batch b, KV head h holds absolute position x = T - L(T) + r (rows at or past
// L(T) are unspecified by onnxruntime; 0 here), with T = seqlens_k[b] + 1 tokens seen and P = T - S
// cached before this step: x >= P comes from this step's new rows (new_k / new_v, rotated, S rows
// per head), x < P from past row x - (P - L(P)). present is its own buffer (compaction moves rows
// down, so it cannot be updated in place). One thread per present element.
// Buffers: new_k, new_v, seqlens, total_len, past_k, past_v, present_k, present_v (raw copies: the
// cache's bits move unchanged).
// Params: N (threads), S, C (capacity), KVH, D, WINDOW_SIZE.
#import attention::window
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) {
        return;
    }
    let d = i % D();
    let r = (i / D()) % C();
    let bh = i / (D() * C());
    let b = bh / KVH();
    let total = u32(max(seqlens_load(b) + 1, 0));
    var past = 0u;
    if (i32(S()) != total_len_load(0u)) {
        past = u32(max(i32(total) - i32(S()), 0));
    }
    let lt = resident(total, C(), WINDOW_SIZE());
    var k = 0u;
    var v = 0u;
    if (r < lt) {
        let x = total - lt + r;
        if (x >= past) {
            let src = (bh * S() + x - past) * D() + d;
            k = new_k_load(src);
            v = new_v_load(src);
        } else {
            let src = (bh * C() + x - (past - resident(past, C(), WINDOW_SIZE()))) * D() + d;
            k = past_k_load(src);
            v = past_v_load(src);
        }
    }
    present_k_store(i, k);
    present_v_store(i, v);
}
