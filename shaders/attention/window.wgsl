#define_import_path attention::window

// Window-sized KV caches (GroupQueryAttention sliding_window_cache = 1), as onnxruntime's
// contrib-op docs define them: with capacity C >= window W, after T tokens the cache holds the
// L(T) most recent positions T - L(T) .. T - 1 at rows 0 .. L(T) - 1, where
//   L(T) = T                                 if T <= C
//   L(T) = T - G * ceil((T - C) / G)         otherwise, G = C - W + 1
// so the whole window stays resident and eviction happens G positions at a time.

fn resident(total: u32, capacity: u32, window: u32) -> u32 {
    if (total <= capacity) {
        return total;
    }
    let g = capacity - window + 1u;
    return total - g * ((total - capacity + g - 1u) / g);
}
