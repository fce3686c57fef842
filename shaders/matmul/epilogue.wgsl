#define_import_path matmul::epilogue

// The last step of every matmul kernel, applied to one accumulated dot product at row m and
// column n of one output matrix. MatMul stores it as is; Gemm (def GEMM) scales it and adds the
// bias C, broadcast to [M, N] through the strides C_MS / C_NS (0 on a broadcast axis).
// The kernel that imports this declares the binding `c` when HAS_C is defined.
fn matmul_finish(acc: #{T}, m: u32, n: u32) -> #{T} {
#ifdef GEMM
    var v = ALPHA() * acc;
#ifdef HAS_C
    v += BETA() * c[m * C_MS() + n * C_NS()];
#endif
    return v;
#else
    return acc;
#endif
}
