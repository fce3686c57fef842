#define_import_path matmul::epilogue

// The last step of every matmul kernel, applied to one accumulated dot product at row m and
// column n of one output matrix. MatMul stores it as is; Gemm (def GEMM) scales it and adds the
// bias C, broadcast to [M, N] through the strides C_MS / C_NS (0 on a broadcast axis).
// The kernel that imports this binds the buffer `c` when HAS_C is defined. T is the type the
// product is computed in (the operands' compute type). With CHECKED (int64 products, computed in
// i32) every sum and product checks the int32 range and reports leaving it.

fn matmul_add(a: #{T}, b: #{T}) -> #{T} {
#ifdef CHECKED
    return onyxia_checked_add(a, b);
#else
    return a + b;
#endif
}

fn matmul_mac(acc: #{T}, a: #{T}, b: #{T}) -> #{T} {
#ifdef CHECKED
    return onyxia_checked_add(acc, onyxia_checked_mul(a, b));
#else
    return acc + a * b;
#endif
}
fn matmul_finish(acc: #{T}, m: u32, n: u32) -> #{T} {
#ifdef GEMM
    var v = ALPHA() * acc;  // Gemm's integer alpha/beta are 1 or 0 in practice
#ifdef HAS_C
    v = matmul_add(v, BETA() * #{T}(c_load(m * C_MS() + n * C_NS())));
#endif
    return v;
#else
    return acc;
#endif
}
