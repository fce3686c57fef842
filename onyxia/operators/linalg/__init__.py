"""Linear algebra: Einsum and Det (shaders/linalg/)."""
