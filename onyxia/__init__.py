"""onyxia: compile ONNX models into WGSL compute-shader plans and run them on any GPU wgpu reaches."""

from onyxia.compiler import CompilerPipeline, Pass, PassResult, Stage
from onyxia.errors import OnyxiaError
from onyxia.ir import IrGraph, SymDim
from onyxia.llm.seq2seq import Seq2SeqSession
from onyxia.onnx import load_model
from onyxia.operators import Operator, OperatorRegistry, core_operator_registry
from onyxia.plan import CompiledModel
from onyxia.runtime import DeviceTensor, PlanExecutor, Runtime
from onyxia.session import InferenceSession

__version__ = "0.1.0"

__all__ = ["CompiledModel", "CompilerPipeline", "DeviceTensor", "InferenceSession", "IrGraph", "OnyxiaError",
           "Operator", "OperatorRegistry", "Pass", "PassResult", "PlanExecutor", "Runtime", "Seq2SeqSession", "Stage",
           "SymDim", "core_operator_registry", "load_model"]
