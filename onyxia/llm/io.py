"""The decoder's inputs and outputs, and a value for every dimension symbol they use.

An exporter names dimensions as it likes: onnxruntime-genai's builder writes `kv_cache_dim` for the
KV head size, `past_sliding_length` / `total_sliding_length` for window-sized caches, Optimum
writes `past_sequence_length + sequence_length`. `bind_decoder_io` sorts every symbol of every
decoder input and output into one of:

- a session length that changes every step: batch, sequence, past and total sequence length;
- a size the config gives (KV head size, KV head count, vocabulary, window cache capacity), which
  is written into the graph's I/O shapes as a literal before compiling;

and refuses any other symbol with one ConfigError naming the dimension, the tensor and axis, and
the config field that would have given it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from onyxia.compiler.passes.if_inlining import inline_constant_ifs
from onyxia.errors import ConfigError
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.graph import IrGraph, TensorKind
from onyxia.ir.shapes import Dim, Shape, SymDim
from onyxia.llm.config import GenaiConfig

MS_DOMAIN = "com.microsoft"
WINDOW_ATTR = "sliding_window_cache"


@dataclass(frozen=True)
class DecoderIO:
    """Names and dimension symbols of one decoder, as the session feeds it."""

    input_ids: str
    mask: str | None
    positions: str | None
    kv: tuple[tuple[str, str], ...]  # (past, present) per cache tensor
    windowed: frozenset[str]  # past inputs whose cache is window-sized (sliding_window_cache = 1)
    dtypes: dict[str, np.dtype]
    batch: str | None  # None when the model fixes it to 1
    sequence: str
    past: str | None  # None when every layer's cache is window-sized
    total: str | None  # a bare symbol for past + sequence, when the model names one
    fixed: dict[str, int] = field(default_factory=dict)  # symbols bound from the config
    window_capacity: int = 0  # rows of a window-sized cache (0: none)


def _windowed_pasts(graph: IrGraph) -> dict[str, int]:
    """Past inputs of GroupQueryAttention nodes with window-sized caches → their window size."""
    found: dict[str, int] = {}
    for node in graph.nodes:
        if node.op_type == "GroupQueryAttention" and node.domain == MS_DOMAIN \
                and int(node.attributes.get(WINDOW_ATTR, 0)) == 1:
            for i in (3, 4):
                if len(node.inputs) > i and node.inputs[i]:
                    found[node.inputs[i]] = int(node.attributes.get("local_window_size", -1))
    return found


def window_capacity(config: GenaiConfig, windows: dict[str, int], max_length: int) -> int:
    """Rows of a window-sized cache: the window plus slack (never more than max_length).

    onnxruntime lets the caller choose any capacity C >= window; slack above the window makes
    the kernel compact the cache once every C - window + 1 steps instead of every step.
    """
    sizes = set(windows.values())
    sw = config.decoder.sliding_window
    window = max(sizes) if sizes else (sw.window_size if sw else 0)
    if window <= 0:
        raise ConfigError(f"{config.model_path.name}: a GroupQueryAttention with {WINDOW_ATTR} = 1 has no "
                          "local_window_size (onnxruntime requires one > 0)")
    slack = sw.cache_slack if sw and sw.cache_slack else window
    return max(min(window + slack, max_length), window)


def declared_output_shapes(config: GenaiConfig) -> dict[str, Shape]:
    """The output shapes the ONNX file declares (the loader infers outputs; names matter here)."""
    proto = onnx.load(str(config.model_path), load_external_data=False)
    shapes = {}
    for vi in proto.graph.output:
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = tuple(parse_dim(d.dim_param) if d.dim_param else
                                (int(d.dim_value) if d.HasField("dim_value") else SymDim.symbol(f"{vi.name}:{i}"))
                                for i, d in enumerate(dims))
    return shapes


def bind_decoder_io(graph: IrGraph, config: GenaiConfig, max_length: int,
                    output_shapes: dict[str, Shape] | None = None) -> DecoderIO:
    """Check that the names the config gives exist in the model and bind every I/O dimension.

    `output_shapes`: the outputs' declared shapes (default: read from the model file).
    """
    dec, model = config.decoder, config.model_path.name
    past = [n for layer in range(dec.num_hidden_layers) for n in dec.past_names(layer)]
    present = [n for layer in range(dec.num_hidden_layers) for n in dec.present_names(layer)]
    # genai treats an attention_mask or position_ids the model does not take as absent; a
    # position_ids input the config does not name (Optimum's layout) is still position ids.
    mask = dec.attention_mask if dec.attention_mask in graph.inputs else None
    positions = next((n for n in (dec.position_ids, "position_ids") if n and n in graph.inputs), None)
    expected = [dec.input_ids, *past]
    missing = [n for n in expected if n not in graph.inputs]
    if missing:
        raise ConfigError(f"{config.path} names model inputs {missing} that {model} does not have "
                          f"(its inputs: {', '.join(graph.inputs)})")
    unknown = [n for n in graph.inputs if n not in (*expected, mask, positions)]
    if unknown:
        raise ConfigError(f"{model} has inputs {unknown} that {config.path} does not describe "
                          "(model.decoder.inputs)")
    missing = [n for n in (dec.logits, *present) if n not in graph.outputs]
    if missing:
        raise ConfigError(f"{config.path} names model outputs {missing} that {model} does not have "
                          f"(its outputs: {', '.join(graph.outputs)})")

    windows = _windowed_pasts(graph)
    windowed = frozenset(p for p in past if p in windows)
    capacity = window_capacity(config, windows, max_length) if windowed else 0
    binder = _Binder(graph, config, declared_output_shapes(config) if output_shapes is None else output_shapes)
    batch = binder.session(dec.input_ids, 0, "batch", allow_one=True)
    sequence = binder.session(dec.input_ids, 1, "sequence length")
    past_symbol = None
    for p, q in zip(past, present):
        for tensor in (p, q):
            binder.session(tensor, 0, "batch", allow_one=True)
            binder.config_dim(tensor, 1, dec.num_key_value_heads, "model.decoder.num_key_value_heads")
            binder.config_dim(tensor, 3, dec.head_size, "model.decoder.head_size")
        if p in windowed:
            binder.config_dim(p, 2, capacity, "model.decoder.sliding_window (window cache capacity)")
            binder.config_dim(q, 2, capacity, "model.decoder.sliding_window (window cache capacity)")
            continue
        symbol = binder.session(p, 2, "past sequence length")
        if past_symbol is not None and symbol != past_symbol:
            raise ConfigError(f"{model}: past inputs use two past-length symbols, '{past_symbol}' and "
                              f"'{symbol}' ('{p}'); one session length serves every full-length cache")
        past_symbol = symbol
        binder.session(q, 2, "total sequence length", expression=True)
    # After the caches: Optimum's mask is [batch, past_sequence_length + sequence_length].
    total = binder.session(mask, 1, "total sequence length", expression=True) if mask else None
    binder.config_dim(dec.logits, 2, config.vocab_size, "model.vocab_size")
    for name in [*graph.inputs, *graph.outputs]:
        binder.leftovers(name)
    fed = [dec.input_ids, *(n for n in (mask, positions) if n), *past]
    return DecoderIO(
        input_ids=dec.input_ids, mask=mask, positions=positions, kv=tuple(zip(past, present)), windowed=windowed,
        dtypes={n: graph.tensor(n).dtype.numpy for n in fed},  # type: ignore[union-attr]
        batch=batch, sequence=sequence, past=past_symbol,  # type: ignore[arg-type]
        total=total if total and total not in (sequence, past_symbol) else None,
        fixed=binder.fixed, window_capacity=capacity)


class _Binder:
    """Collects symbol → value bindings; one symbol, one meaning."""

    def __init__(self, graph: IrGraph, config: GenaiConfig, output_shapes: dict[str, Shape]):
        self.graph, self.config, self.model = graph, config, config.model_path.name
        self.shapes = {n: graph.tensor(n).shape or () for n in graph.inputs}
        self.shapes.update({n: output_shapes.get(n, ()) for n in graph.outputs})
        self.fixed: dict[str, int] = {}
        self.session_symbols: dict[str, str] = {}  # symbol -> what it is
        self.seen: set[tuple[str, int]] = set()

    def _dim(self, tensor: str, axis: int, what: str) -> Dim:
        shape = self.shapes[tensor]
        if axis >= len(shape):
            raise ConfigError(f"{self.model} '{tensor}' has rank {len(shape)}; expected {what} at axis {axis}")
        self.seen.add((tensor, axis))
        return shape[axis]

    def session(self, tensor: str, axis: int, what: str, allow_one: bool = False,
                expression: bool = False) -> str | None:
        """A length the session sets every step: a bare symbol (or, with `expression`, a sum of
        session symbols such as Optimum's `past_sequence_length + sequence_length`)."""
        d = self._dim(tensor, axis, what)
        if isinstance(d, SymDim) and str(d) in d.symbols:  # a bare symbol, not an expression
            name = str(d)
            if name in self.fixed:
                raise ConfigError(f"{self.model}: dimension '{name}' of '{tensor}' axis {axis} is the {what}, "
                                  f"but it is also a size the config fixes to {self.fixed[name]}")
            self.session_symbols.setdefault(name, what)
            return name
        if expression and isinstance(d, SymDim) and d.symbols <= set(self.session_symbols):
            return None
        if allow_one and d == 1:
            return None
        raise ConfigError(f"{self.model} '{tensor}' axis {axis} ({what}) is {d}; it must be a dimension "
                          "symbol so one plan serves the prefill and every decode step")

    def config_dim(self, tensor: str, axis: int, value: int, field_name: str) -> None:
        d = self._dim(tensor, axis, field_name)
        if isinstance(d, int):
            if d != value:
                raise ConfigError(f"{self.model} '{tensor}' axis {axis} is {d}, but {field_name} in "
                                  f"{self.config.path.name} gives {value}")
            return
        if str(d) not in d.symbols:
            raise ConfigError(f"{self.model} '{tensor}' axis {axis} is '{d}'; expected {field_name} "
                              f"({value}) or one dimension symbol for it")
        name = str(d)
        if name in self.session_symbols:
            raise ConfigError(f"{self.model}: dimension '{name}' of '{tensor}' axis {axis} stands for "
                              f"{field_name} ({value}) and also for the {self.session_symbols[name]}")
        if self.fixed.setdefault(name, value) != value:
            raise ConfigError(f"{self.model}: dimension '{name}' of '{tensor}' axis {axis} is {field_name} "
                              f"({value}), but elsewhere it stands for {self.fixed[name]}")

    def leftovers(self, tensor: str) -> None:
        """Every symbol of `tensor` must have been bound by now."""
        for axis, d in enumerate(self.shapes[tensor]):
            if not isinstance(d, SymDim):
                continue
            unbound = sorted(d.symbols - set(self.fixed) - set(self.session_symbols))
            if unbound:
                raise ConfigError(
                    f"{self.model}: dimension '{unbound[0]}' of '{tensor}' axis {axis} is neither a session "
                    f"length (batch, sequence, past, total) nor a size {self.config.path.name} gives "
                    f"(model.decoder.head_size, num_key_value_heads, sliding_window, model.vocab_size)")


# Optimum's merged decoders (decoder_model_merged.onnx, its legacy export that transformers.js
# repositories kept) hold the graphs without and with a cache as the branches of one If.
CACHE_BRANCH = "use_cache_branch"


def take_cache_branch(graph: IrGraph) -> bool:
    """Make a merged decoder's `use_cache_branch` input the constant true and put the If's
    branch with a cache in its place: that graph also runs a prefill (a past of length 0), as
    Optimum's own decoder_with_past export does. False: the decoder has no such input."""
    if CACHE_BRANCH not in graph.inputs:
        return False
    tensor = graph.tensor(CACHE_BRANCH)
    shape = tensor.shape or ()
    if tensor.dtype is None or tensor.dtype.name != "bool" or not all(isinstance(d, int) for d in shape) \
            or int(np.prod(shape, dtype=np.int64)) != 1:
        raise ConfigError(f"input '{CACHE_BRANCH}' (a merged decoder's branch switch) must be one bool, got "
                          f"{tensor.dtype} {list(shape)}")
    graph.inputs.remove(CACHE_BRANCH)
    tensor.kind, tensor.value = TensorKind.WEIGHT, np.ones(shape, bool)
    # The taken branch joins the graph (the optimization passes see the whole decoder); its
    # outputs reach the If's names (the model's outputs) through Identity, a view.
    for node in [n for n in graph.nodes if n.op_type == "If" and n.inputs and n.inputs[0] == CACHE_BRANCH]:
        branch = node.attributes.get("then_branch")
        if not isinstance(branch, IrGraph) or len(branch.outputs) != len(node.outputs):
            raise ConfigError(f"If node '{node.name}' on '{CACHE_BRANCH}' has no then_branch with its "
                              f"{len(node.outputs)} outputs")
    inline_constant_ifs(graph)
    return True


def write_fixed_dims(graph: IrGraph, io: DecoderIO) -> None:
    """Replace config-bound symbols in the decoder's I/O shapes with their values."""
    if not io.fixed:
        return
    for name in [*graph.inputs, *graph.outputs]:
        tensor = graph.tensor(name)
        if tensor.shape is not None:
            tensor.shape = tuple(d.substitute(io.fixed) if isinstance(d, SymDim) else d for d in tensor.shape)
