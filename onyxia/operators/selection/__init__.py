"""Selection: TopK, Hardmax, OneHot, NonZero, Compress, Unique, NonMaxSuppression
(shaders/selection/).
"""
