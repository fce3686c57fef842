// Second pass of a split-K product: y = finish(sum over s of partial[s, i]) for i < P.
// Buffers: partial, [c], [e0, e1, ...], y. Defs: T (compute type), CHECKED, GEMM, HAS_C, EPILOGUE*.
// Params: P (= batch * M * N), M, N, SPLITS; Gemm: ALPHA, BETA, C_MS, C_NS; the epilogue's E<k>D<j>, E<k>S<j>.
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
#ifdef EPILOGUE
    matmul_epilogue_at(i, i % N());
#endif
}
