"""Every user-facing failure is an OnyxiaError subclass naming the model element at fault."""

from __future__ import annotations


class OnyxiaError(Exception):
    """Base class: the message names the node/tensor/symbol and what was expected."""


class ModelLoadError(OnyxiaError):
    """The ONNX file or proto could not be read or is structurally invalid."""


class DimensionError(OnyxiaError):
    """A symbolic dimension is missing, malformed, or out of the allowed range."""


class ShapeInferenceError(OnyxiaError):
    """An operator could not infer the dtype/shape of its outputs."""

    def __init__(self, message: str, *, node: str = "", op_type: str = "", input_index: int | None = None):
        where = f"node '{node}' ({op_type})" if node or op_type else ""
        if input_index is not None:
            where += f" input {input_index}"
        super().__init__(f"{where}: {message}" if where else message)
        self.node = node
        self.op_type = op_type
        self.input_index = input_index


class CarriedShapeError(ShapeInferenceError):
    """A Loop's carried value leaves the body in another shape than it entered (a tensor grown
    by a Concat each iteration): SequenceLoweringPass unrolls such a Loop when its trip count and
    condition are known at compile time."""


class ValueRequiredError(ShapeInferenceError):
    """Inference needs the value of `tensor` (a shape, axes, pads...) and it is not a constant.

    InferenceSession handles this by specializing: on the fed values of the graph inputs the
    tensor's value reads (`sources`), and on the fed sizes of the symbols it reads (`symbols`: a
    size computed from Shape through float math). Both are found in the graph being compiled (the
    tensor may be one a pass created); a plain compile reports the error as is.
    """

    def __init__(self, message: str, *, tensor: str, sources: frozenset[str] = frozenset(),
                 symbols: frozenset[str] = frozenset(), **kw):
        super().__init__(message, **kw)
        self.tensor = tensor
        self.sources = sources
        self.symbols = symbols


class UnsupportedOperatorError(OnyxiaError):
    """The model uses operators the registry does not provide; lists all of them at once."""

    def __init__(self, missing: dict[tuple[str, str], list[str]]):
        self.missing = missing
        parts = []
        for (domain, op_type), nodes in sorted(missing.items()):
            qual = f"{domain}::{op_type}" if domain else op_type
            shown = ", ".join(f"'{n}'" for n in nodes[:5]) + (f" (+{len(nodes) - 5} more)" if len(nodes) > 5 else "")
            parts.append(f"{qual} (nodes {shown})")
        super().__init__(f"unsupported operators: {'; '.join(parts)}")


class UnsupportedDtypeError(OnyxiaError):
    """A tensor's dtype has no device representation."""


class ShaderError(OnyxiaError):
    """A shader template failed to preprocess (file:line) or to validate."""


class PlanError(OnyxiaError):
    """Planning failed, or a saved plan could not be read."""


class InputError(OnyxiaError):
    """A feed is unknown, missing, or of the wrong dtype/rank/shape."""


class DeviceError(OnyxiaError):
    """No usable GPU adapter, or the device was lost."""


class ConfigError(OnyxiaError):
    """A model folder's genai_config.json / tokenizer.json is missing or malformed."""


class PipelineError(OnyxiaError):
    """The pass pipeline breaks a pass's declared needs (a pass missing, or passes out of order)."""


class CliError(OnyxiaError):
    """A command-line request cannot be carried out: an argument out of range, an output path
    that cannot be written, a `--check` reference run that onnxruntime refused."""


class ComputeError(OnyxiaError):
    """A kernel detected a result the device cannot represent (an int64 value outside the
    32-bit range the GPU computes int64 in); the run's outputs are not returned."""
