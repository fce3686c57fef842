"""Quantized operators: MatMulNBits, GatherBlockQuantized, (De)QuantizeLinear, the QLinear ops,
MatMulBnb4 (shaders/quantized/).
"""
