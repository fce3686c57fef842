"""Data movement: the Gathers, Slice, Trilu, Scatters, Transpose, Expand, Tile, Pad, Concat, Split
(shaders/indexing/).
"""
