"""Matrix products: MatMul and Gemm, their gemv / gemm kernel variants, weight panels, fused
epilogues (shaders/matmul/).
"""
