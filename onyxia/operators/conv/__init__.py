"""Convolutions: Conv, ConvTranspose, CausalConvWithState, DeformConv and their window geometry
(shaders/conv/).
"""
