"""Shape values and views: Shape, Size, Constant, ConstantOfShape, Range, Reshape, Squeeze, ... (no
kernels but fill).
"""
