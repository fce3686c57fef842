"""Row normalizations: Softmax, the LayerNorm family, BatchNorm, InstanceNorm, GroupNorm
(shaders/normalization/).
"""
