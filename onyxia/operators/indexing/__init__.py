"""Data movement: the Gathers, Slice, Trilu, Scatters, Transpose, Expand, Tile, Pad, CenterCropPad,
Concat, Split (shaders/indexing/).
"""
