// Second pass of a split-K product: y = finish(sum over s of partial[s, i]) for i < P.
// Buffers: partial, [c], y. Defs: T (compute type), CHECKED, GEMM, HAS_C. Params: P (= batch * M * N), M, N, SPLITS; Gemm: ALPHA, BETA, C_MS, C_NS.
#import common::grid
#import matmul::epilogue


@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= P()) { return; }
    var acc = #{T}(0);
    for (var s = 0u; s < SPLITS(); s++) {
        acc = matmul_add(acc, #{T}(partial_load(s * P() + i)));
    }
    y_store(i, y_t(matmul_finish(acc, (i / N()) % M(), i % N())));
}
