// Direct convolution, one thread per output element: for depthwise and other thin products
// where a tiled GEMM would leave most of its tile idle (few output channels per group or a
// short reduction). Weight reads are the same for neighbouring threads (same channel), so
// they are served from cache.
// Buffers: x, w, [bias], [e0, e1, ...], y. Defs: T (the compute type: f32, or i32 for integer convolutions),
// TRANSPOSED, HAS_BIAS, EPILOGUE* (fused ops, matmul::epilogue, column n = ow). Params: TOTAL
// (= N * M * P), M and those of conv::window.
#import common::grid
#import conv::window
#import matmul::epilogue

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= TOTAL()) { return; }
    let p = i % P();
    let t = i / P();
    let oc = t % M();
    let n = t / M();
    let g = oc / MG();
    let m = oc % MG();
    let col = conv_column(n * P() + p, g);
#ifdef HAS_BIAS
    var acc = #{T}(bias_load(oc));
#else
    var acc = #{T}(0);
#endif
    for (var k = 0u; k < K(); k++) {
        acc += conv_patch(col, k) * conv_weight(g, m, k);
    }
    y_store(i, y_t(acc));
#ifdef EPILOGUE
    matmul_epilogue_at(i, p % OW());
#endif
}
