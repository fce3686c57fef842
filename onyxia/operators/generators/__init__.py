"""Tensors made from a shape: EyeLike, the random generators, Multinomial, MelWeightMatrix (the map
kernel of elementwise/).
"""
