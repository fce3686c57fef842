"""Attention operators: GroupQueryAttention and RotaryEmbedding (com.microsoft), ONNX Attention,
split-KV (shaders/attention/).
"""
