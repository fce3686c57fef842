"""Quantized operators: MatMulNBits, GatherBlockQuantized, (De)QuantizeLinear, the QLinear ops
(shaders/quantized/).
"""
