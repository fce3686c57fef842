#define_import_path matmul::epilogue
#import elementwise::math

// The last step of every matmul kernel, applied to one accumulated dot product at row m and
// column n of one output matrix, stored at the flat output index o. MatMul stores it as is; Gemm
// (def GEMM) scales it and adds the bias C, broadcast to [M, N] through the strides C_MS / C_NS
// (0 on a broadcast axis). With EPILOGUE, the elementwise ops that consumed the product follow
// (fused by passes/epilogue_fusion.py; operators/epilogue.py writes the defs): the product is
// x<slot>, the other operands e0, e1, ... are read at o (EPILOGUE_LOADS), the ops' values are
// `let`s (EPILOGUE_BODY) and EPILOGUE_EXPR the result, in f32 as the fused elementwise kernel
// computes (only float products get one).
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

#ifdef EPILOGUE
fn matmul_epilogue(v: f32, o: u32, n: u32) -> f32 {
    #{EPILOGUE_LOADS}
    #{EPILOGUE_BODY}
    return #{EPILOGUE_EXPR};
}
#endif

fn matmul_finish(acc: #{T}, o: u32, m: u32, n: u32) -> #{T} {
    var v = acc;
#ifdef GEMM
    v = ALPHA() * v;  // Gemm's integer alpha/beta are 1 or 0 in practice
#ifdef HAS_C
    v = matmul_add(v, BETA() * #{T}(c_load(m * C_MS() + n * C_NS())));
#endif
#endif
#ifdef EPILOGUE
    v = matmul_epilogue(v, o, n);
#endif
    return v;
}
