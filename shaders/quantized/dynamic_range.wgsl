// onyxia::DynamicRange: partial ranges of x for DynamicQuantizeLinear's scale, made once for every
// DynamicQuantMatMul that reads x (dynamic_quant_matmul.wgsl with RANGE_IN reduces them).
// Workgroup g (64 threads) covers elements [g * CHUNK, (g + 1) * CHUNK) of x (CHUNK = 64 x 256: each
// thread's loop runs 256 times) and writes range[2 g] = min(0, x...), range[2 g + 1] = max(0, x...).
// Buffers: x (f32), range (f32 [GROUPS, 2]). Defs: WG (64). Params: TOTAL (elements of x), GROUPS.
#import common::grid
#import quantized::range

const THREADS = #{WG}u;
const PER_THREAD = 256u;

@compute @workgroup_size(#{WG})
fn main(wg: Grid) {
    let g = grid_group(wg);
    let lid = wg.lid;
    let base = g * THREADS * PER_THREAD;
    var lo = 0.0;
    var hi = 0.0;
    if (g < GROUPS()) {
        for (var t = 0u; t < PER_THREAD; t++) {
            let i = base + t * THREADS + lid;
            if (i < TOTAL()) {
                let v = f32(x_load(i));
                lo = min(lo, v);
                hi = max(hi, v);
            }
        }
    }
    let both = workgroup_range(lid, lo, hi);
    if (lid == 0u && g < GROUPS()) {
        range_store(2u * g, both.x);
        range_store(2u * g + 1u, both.y);
    }
}
