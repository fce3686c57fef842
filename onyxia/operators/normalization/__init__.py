"""Row normalizations: Softmax, the LayerNorm family, BatchNorm, InstanceNorm, GroupNorm, LRN
(shaders/normalization/).
"""
