"""Graph IR: IrGraph, Node, TensorDef, symbolic dimensions and element types."""

from onyxia.ir.dim_env import DimEnv
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph, Node, NodeId, TensorDef, TensorId, TensorKind
from onyxia.ir.shapes import Dim, Shape, SymDim

__all__ = ["DType", "Dim", "DimEnv", "IrGraph", "Node", "NodeId", "Shape", "SymDim", "TensorDef", "TensorId",
           "TensorKind", "parse_dim"]
