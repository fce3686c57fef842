"""Parsing ONNX dim_param text ("batch", "seq * heads", "(a+b)//2") into dimensions.

dim_param strings come from untrusted model files, so the parser bounds the text's length, the
expression's depth and node count, and the size of the expanded polynomial, with a
DimensionError naming the expression (issue 12's hostile-expression cases).
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable, Mapping

from onyxia.errors import DimensionError
from onyxia.ir.shapes import Dim, SymDim, _divide, _terms_of

# Exporters write names such as "batch-size" or "encoder.seq": a word glued to another by "-" or
# "." is one symbol, never a subtraction or attribute (formatted expressions space their "-").
_GLUED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.\w+|-[A-Za-z_]\w*)+")

_BINARY_OPS: dict[type[ast.operator], Callable[[Dim, Dim], Dim]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: lambda a, b: _divide(a, b, "//"),
    ast.Div: lambda a, b: _divide(a, b, "//"),  # exporters write "/" for integer division
    ast.Mod: lambda a, b: _divide(a, b, "%"),
}


# A dim_param comes from an untrusted model: bound what parsing it may cost. Real exporters write
# a name or a few terms ("past_sequence_length + 1"); these limits leave a wide margin.
MAX_DIM_TEXT = 1000  # characters
MAX_DIM_DEPTH = 32  # nesting of the expression tree (the parser recurses over it)
MAX_DIM_NODES = 256  # names, numbers and operators
MAX_DIM_TERMS = 256  # terms of the expanded polynomial: a product of sums multiplies them


# Plans repeat expressions (resnet18's: 1524 parsed, a few dozen distinct) and a plan file's
# load parses each twice (check, then decode): parsing was 70% of a cached plan's load.
@functools.lru_cache(maxsize=4096)
def parse_dim(text: str) -> Dim:
    """Parse an ONNX dim_param ("batch", "seq * heads", "(a+b)//2") into an int or SymDim.

    A string that is no expression at all ("batch size") is one symbol name; a valid expression
    using anything but names, integers, + - * // / % and parentheses raises DimensionError, and
    so does one beyond the MAX_DIM_* bounds (length, nesting, size, expanded terms).
    """
    stripped = text.strip()
    if not stripped:
        raise DimensionError("empty dimension expression")
    if len(stripped) > MAX_DIM_TEXT:
        raise DimensionError(f"dimension expression {_shorten(stripped)} is {len(stripped)} characters "
                             f"long (at most {MAX_DIM_TEXT})")
    glued: dict[str, str] = {}

    def placeholder(match: re.Match[str]) -> str:
        key = f"_onyxia_name{len(glued)}_"
        glued[key] = match.group(0)
        return key

    try:
        tree = ast.parse(_GLUED_NAME.sub(placeholder, stripped), mode="eval")
    except SyntaxError:
        return SymDim.symbol(stripped)
    except (RecursionError, MemoryError):  # CPython's parser on deep nesting
        raise DimensionError(f"dimension expression {_shorten(stripped)} is nested too deeply") from None
    _check_size(tree.body, stripped)
    try:
        return _from_ast(tree.body, stripped, glued)
    except ZeroDivisionError:
        raise DimensionError(f"dimension expression {stripped!r} divides by zero") from None


def _shorten(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _check_size(root: ast.expr, text: str) -> None:
    """Depth and node count of the tree, iteratively: _from_ast recurses only once this passed."""
    stack, count = [(root, 1)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DIM_DEPTH:
            raise DimensionError(f"dimension expression {_shorten(text)} is nested more than "
                                 f"{MAX_DIM_DEPTH} deep")
        if count > MAX_DIM_NODES:
            raise DimensionError(f"dimension expression {_shorten(text)} has more than "
                                 f"{MAX_DIM_NODES} names, numbers and operators")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.operator, ast.unaryop)))


def _multiply(a: Dim, b: Dim, text: str) -> Dim:
    """a * b, refusing a product whose expansion could exceed MAX_DIM_TERMS terms before
    computing it: (a1 + ... + a12) * (b1 + ... + b12) * ... grows geometrically."""
    if len(_terms_of(a)) * len(_terms_of(b)) > MAX_DIM_TERMS:
        raise DimensionError(f"dimension expression {_shorten(text)} expands to more than "
                             f"{MAX_DIM_TERMS} terms")
    return a * b


def _from_ast(node: ast.expr, text: str, glued: Mapping[str, str]) -> Dim:
    match node:
        case ast.Name(id=name):
            return SymDim.symbol(glued.get(name, name))
        case ast.Constant(value=int() as value) if not isinstance(value, bool):
            return value
        case ast.Constant(value=str() as name) if name.strip():  # a quoted name: 4 * 'batch size'
            return SymDim.symbol(name)
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_from_ast(operand, text, glued)
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return _from_ast(operand, text, glued)
        case ast.BinOp(left=left, op=ast.Mult(), right=right):
            return _multiply(_from_ast(left, text, glued), _from_ast(right, text, glued), text)
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY_OPS:
            return _BINARY_OPS[type(op)](_from_ast(left, text, glued),
                                         _from_ast(right, text, glued))
    raise DimensionError(
        f"dimension expression {text!r}: {ast.unparse(node)!r} ({type(node).__name__}) is not "
        "allowed; use names, non-negative integers, + - * // % and parentheses")


# -- shape helpers --------------------------------------------------------------------------
