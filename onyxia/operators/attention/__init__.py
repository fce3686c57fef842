"""Attention operators: GroupQueryAttention, RotaryEmbedding, ONNX Attention, FlexAttention,
LinearAttention, split-KV (shaders/attention/).
"""
