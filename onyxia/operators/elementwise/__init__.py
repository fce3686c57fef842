"""Elementwise families and the shared map kernel: tables of unary/binary ops, Cast, fused chains
(shaders/elementwise/).
"""
