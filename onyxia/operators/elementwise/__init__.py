"""Elementwise families and the shared map kernel: tables of unary/binary ops, SwiGLU, Cast, fused
chains (shaders/elementwise/).
"""
