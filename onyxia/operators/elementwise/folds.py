"""NumPy folds of the elementwise rows where plain numpy differs from ONNX (integer Div and Pow,
BitShift counts) or where values may be symbolic dims (shape arithmetic folded at compile time).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from onyxia.ir.shapes import SymDim


def _signs(a: Any, b: Any) -> range:
    """The possible signs of a - b for numbers and symbolic dims (which are >= 0)."""
    d = a - b
    if not isinstance(d, SymDim):
        return range(int(d > 0) - int(d < 0), int(d > 0) - int(d < 0) + 1)
    sym_a, sym_b = isinstance(a, SymDim), isinstance(b, SymDim)
    if sym_a and not sym_b and b <= 0:
        return range(0 if b == 0 else 1, 2)
    if sym_b and not sym_a and a <= 0:
        return range(-1, 0 if a < 0 else 1)
    return range(-1, 2)


def symbolic_compare(on_numbers: Callable, test: Callable[[int], bool], choose: bool = False) -> Callable:
    """`on_numbers` for number arrays. For object arrays (shape values holding SymDims): `test` of
    the sign of a - b elementwise (choose: a if it holds, else b), folding only what every
    value of the dims decides; TypeError otherwise."""
    def scalar(a: Any, b: Any) -> Any:
        outcomes = {test(sign) for sign in _signs(a, b)}
        if len(outcomes) != 1:
            raise TypeError(f"comparing {a} and {b} depends on the dimensions")
        result = outcomes.pop()
        return (a if result else b) if choose else result
    elementwise = np.frompyfunc(scalar, 2, 1)

    def fold(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return elementwise(a, b) if object in (a.dtype, b.dtype) else on_numbers(a, b)
    return fold


def _div_scalar(a: Any, b: Any) -> Any:
    if not isinstance(b, SymDim) and b == 0:
        raise TypeError("division by zero")
    if isinstance(a, SymDim) or isinstance(b, SymDim):
        return a // b  # dims are >= 0: floor and truncation agree
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        q = abs(int(a)) // abs(int(b))  # exact, and truncated toward zero
        return q if (a < 0) == (b < 0) else -q
    return a / b


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if object in (a.dtype, b.dtype):
        return np.frompyfunc(_div_scalar, 2, 1)(a, b)
    if np.issubdtype(np.result_type(a, b), np.integer):
        # ONNX integer Div truncates toward zero (as C and WGSL do), numpy's // floors
        q = np.floor_divide(a, b)
        return np.where((np.mod(a, b) != 0) & ((a < 0) != (b < 0)), q + 1, q)
    return np.divide(a, b)


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):  # onnxruntime: (T)pow(double, double)
        return np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))
    return np.power(a, b)


def shift(a: np.ndarray, b: np.ndarray, direction: str) -> np.ndarray:
    out = (b < 0) | (b >= a.dtype.itemsize * 8)  # counts numpy leaves to the C compiler
    b = np.where(out, 0, b).astype(b.dtype)
    if direction == "LEFT":
        return np.where(out, 0, np.left_shift(a, b))
    return np.where(out, np.negative((a < 0).astype(a.dtype)), np.right_shift(a, b))  # fill: the sign


def isinf(x: np.ndarray, detect_negative: int, detect_positive: int) -> np.ndarray:
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))
