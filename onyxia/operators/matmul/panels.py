"""Column panels: the layout constant matrix-product weights are stored in on the device.

B [K, N] is cut into strips of PANEL_COLUMNS columns (the last one N % PANEL_COLUMNS wide when
N is not a multiple), and each strip is stored row-major over the whole K, one strip after
another: element (k, n) of B sits at `first * K + k * width + (n - first)`, `first` being the
strip's first column and `width` its width (shaders/matmul/panels.wgsl). The element count is
B's, so the tensor keeps its [K, N] shape and dtype (a plan stores and checks it as before);
only the order of its elements differs, which the product node's PANELS_ATTR records
(compiler/passes/weight_panels.py rewrites the weights, operators/matmul/matmul.py plans and folds the
products reading them).

Why: a decode product (M = 1) on a CPU-type adapter (lavapipe) runs each workgroup of
gemv_chunked.wgsl over 32 columns of B: row-major, it reads 128 bytes per row of B and then
jumps N * 4 bytes (4 KiB at N = 1024: power-of-two strides that share cache sets); in a panel,
the same workgroup streams one contiguous run. Measured standalone (lavapipe, Mesa 22.3, 2
shared cores, median of 11 interleaved rounds, 48 MiB of distinct weights per round): f32
1.21 - 1.95x at K x N = 512 x 512/1024/1408 and 1408 x 512, 1.02x at 512 x 8000; f16
1.17 - 1.64x, 1.23x at 512 x 8000. Strips of 4 columns (one invocation's run) or 4 x 4
blocks interleaved per invocation measured the same within the noise; 32-column strips keep
each row of a strip 128 contiguous bytes, what a GPU's neighbouring invocations read
coalesced, so one layout serves every adapter and one plan file still runs on any.
"""

from __future__ import annotations

import numpy as np

PANEL_COLUMNS = 32  # = gemv.COLUMNS_PER_WORKGROUP: one chunked workgroup streams one strip
PANELS_ATTR = "b_panels"  # on MatMul / Gemm (and their Epilogue forms): B is stored in panels


def to_panels(b: np.ndarray) -> np.ndarray:
    """B [K, N] (row-major) in the panel order, returned with B's shape."""
    k, n = b.shape
    full = n - n % PANEL_COLUMNS
    strips = b[:, :full].reshape(k, full // PANEL_COLUMNS, PANEL_COLUMNS).transpose(1, 0, 2).reshape(-1)
    return np.concatenate([strips, b[:, full:].reshape(-1)]).reshape(k, n)


def from_panels(p: np.ndarray) -> np.ndarray:
    """The inverse of to_panels: B [K, N] row-major again."""
    k, n = p.shape
    full = n - n % PANEL_COLUMNS
    flat = p.reshape(-1)
    strips = flat[:k * full].reshape(full // PANEL_COLUMNS, k, PANEL_COLUMNS).transpose(1, 0, 2).reshape(k, full)
    return np.concatenate([strips, flat[k * full:].reshape(k, n - full)], axis=1)


__all__ = ["PANELS_ATTR", "PANEL_COLUMNS", "from_panels", "to_panels"]
