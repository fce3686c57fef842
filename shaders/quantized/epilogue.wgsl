#define_import_path quantized::epilogue
#import elementwise::math

// The last step of every MatMulNBits kernel, for the accumulated dot product at row m, column n:
// the bias (HAS_BIAS), then, with EPILOGUE, the elementwise ops that consumed the product
// (fused by passes/epilogue_fusion.py): the product is x<slot>, the other operands are read at
// (m, n) (full [M, N] tensors, [N] rows or scalars: EPILOGUE_LOADS), the ops' values are `let`s
// (EPILOGUE_BODY) and EPILOGUE_EXPR the result, all in f32 as the fused elementwise kernel computes.
// The kernel that imports this binds `bias` and the operands e0, e1, ... the defs name.

fn nbits_epilogue(acc: f32, m: u32, n: u32) -> f32 {
    var v = acc;
#ifdef HAS_BIAS
    v += f32(bias_load(n));
#endif
#ifdef EPILOGUE
    #{EPILOGUE_LOADS}
    #{EPILOGUE_BODY}
    v = #{EPILOGUE_EXPR};
#endif
    return v;
}
