"""Convolutions: Conv, ConvTranspose, CausalConvWithState, DeformConv, Col2Im and their window
geometry (shaders/conv/).
"""
