#define_import_path matmul::epilogue
#import elementwise::math

// The last step of every matmul kernel, applied to one accumulated dot product at row m and
// column n of one output matrix. MatMul stores it as is; Gemm (def GEMM) scales it and adds the
// bias C, broadcast to [M, N] through the strides C_MS / C_NS (0 on a broadcast axis).
// The kernel that imports this binds the buffer `c` when HAS_C is defined. T is the type the
// product is computed in (the operands' compute type). With CHECKED (int64 products, computed in
// i32) every sum and product checks the int32 range and reports leaving it.
//
// EPILOGUE: the elementwise ops that consumed the product run in the kernel that stores it
// (fused by passes/epilogue_fusion.py; operators/matmul/epilogue.py writes the defs). Once an
// invocation has stored all its outputs, it calls matmul_epilogue_at for each: the product is
// read back as stored (x<slot>), the other operands e0, e1, ... at the flat output index o
// (EPILOGUE_LOADS), the ops' values are `let`s (EPILOGUE_BODY) and EPILOGUE_EXPR the result,
// computed in f32 and stored over the product: what the unfused plan computes, bit for bit
// (float16 outputs included). Applying the ops to the accumulators instead, before the first
// store, doubled the product's time on lavapipe (MLP 64x1024x1024 + bias + Relu: 17 -> 36 ms,
// every variant): the ops' code after the K loop cost the loop its registers. Kernels that
// store through a loop over staged values (conv_register, gemv_chunked, depthwise_rows) apply
// matmul_epilogue in that store instead where EPILOGUE_IN_STORE (a float32 output, not Gemm's
// alpha * acc: Epilogue.in_store): the value is then the stored one, and each output saves the
// load and store of the pass after (per-lane accesses, the expensive kind on llvmpipe).
// gemv_chunked's 16-row tile instead runs the ops over its stored outputs a vec4 at a time
// (EPILOGUE4, matmul_epilogue4): on Mesa 25's lavapipe ops in that store slow the whole kernel
// down by a third (operators/matmul/gemv.py QUAD_EPILOGUE_ROWS).

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

#ifdef EPILOGUE
fn matmul_epilogue(v: f32, o: u32, n: u32) -> f32 {
    #{EPILOGUE_LOADS}
    #{EPILOGUE_BODY}
    return #{EPILOGUE_EXPR};
}

#ifdef EPILOGUE4
// The vec4 form (Epilogue.as_quad_pass): outputs o .. o + 3 of one row (columns n .. n + 3, o
// and n multiples of 4), each operand loaded once as a quad (EPILOGUE_LOADS4, w<k>), the ops run
// per lane on that lane's arguments (EPILOGUE_CALL4 calls matmul_epilogue_lane four times).
fn matmul_epilogue_lane(#{EPILOGUE_ARGS}) -> f32 {
    #{EPILOGUE_BODY}
    return #{EPILOGUE_EXPR};
}

fn matmul_epilogue4(v4: vec4<f32>, o: u32, n: u32) -> vec4<f32> {
    #{EPILOGUE_LOADS4}
    return #{EPILOGUE_CALL4};
}
#endif

// The fused ops over the stored output element o (column n).
fn matmul_epilogue_at(o: u32, n: u32) {
    y_store(o, y_t(matmul_epilogue(f32(y_load(o)), o, n)));
}
#endif
