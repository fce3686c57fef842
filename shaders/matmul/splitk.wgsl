// Second pass of a split-K product: y = finish(sum over s of partial[s, i]) for i < P.
// Defs: T, GEMM, HAS_C. Params: P (= batch * M * N), M, N, SPLITS; Gemm: ALPHA, BETA, C_MS, C_NS.
#import common::grid
#import matmul::epilogue

@group(0) @binding(0) var<storage, read> partial: array<#{T}>;
#ifdef HAS_C
@group(0) @binding(1) var<storage, read> c: array<#{T}>;
@group(0) @binding(2) var<storage, read_write> y: array<#{T}>;
#else
@group(0) @binding(1) var<storage, read_write> y: array<#{T}>;
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= P()) { return; }
    var acc = #{T}(0);
    for (var s = 0u; s < SPLITS(); s++) {
        acc += partial[s * P() + i];
    }
    y[i] = matmul_finish(acc, (i / N()) % M(), i % N());
}
