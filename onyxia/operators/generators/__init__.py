"""Tensors made from a shape: EyeLike, the random generators, MelWeightMatrix (the map kernel of
elementwise/).
"""
