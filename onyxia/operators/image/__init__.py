"""Image operators: Resize, GridSample, AffineGrid, DepthToSpace, RoiAlign, MaxRoiPool
(shaders/image/).
"""
