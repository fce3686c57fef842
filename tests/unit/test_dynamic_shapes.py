"""What symbolic inference cannot decide: the ValueRequiredError says which input values and
which symbols a value needs, so InferenceSession specializes on exactly those."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.errors import ValueRequiredError
from tests.helpers import make_model


def _compile(model, dims):
    return onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(model), dims)


def _half_size_resize():
    """Resize to floor(0.5 * (h, w)), the size computed in float from Shape, as exporters write
    interpolate(scale_factor=...) with recompute_scale_factor: not foldable symbolically."""
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Slice", ["s", "two", "four"], ["hw"]),
             h.make_node("Cast", ["hw"], ["hwf"], to=TensorProto.FLOAT),
             h.make_node("Mul", ["hwf", "half"], ["hwh"]),
             h.make_node("Floor", ["hwh"], ["hwfl"]),
             h.make_node("Cast", ["hwfl"], ["hwi"], to=TensorProto.INT64),
             h.make_node("Slice", ["s", "zero", "two"], ["nc"]),
             h.make_node("Concat", ["nc", "hwi"], ["sizes"], axis=0),
             h.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest", name="resize")]
    inits = {"zero": np.array([0]), "two": np.array([2]), "four": np.array([4]),
             "half": np.array(0.5, np.float32)}
    return make_model(nodes, [("x", np.float32, ["n", 3, "h", "w"])], ["y"], inits)


def test_a_size_computed_in_float_needs_the_symbols_it_reads_not_the_pixels():
    with pytest.raises(ValueRequiredError) as info:
        _compile(_half_size_resize(), {"n": 1, "h": 8, "w": 6})
    err = info.value
    assert err.node == "resize" and err.tensor == "sizes"
    assert err.symbols == {"h", "w"}, "n reaches the sizes too, but folds symbolically"
    assert err.sources == frozenset(), "the image's values are not needed"


def test_a_value_read_from_an_input_names_that_input():
    model = make_model([h.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                       [("x", np.float32, ["n", 4]), ("shape", np.int64, [2])], ["y"])
    with pytest.raises(ValueRequiredError) as info:
        _compile(model, {"n": 2})
    assert info.value.sources == {"shape"} and info.value.symbols == frozenset()


@pytest.mark.parametrize("op", ["Slice", "Squeeze"])
def test_symbolic_axes_or_steps_take_the_symbols_values(op):
    # Slice's step / Squeeze's axis computed from a dim: only its value can decide the shape. A
    # symbol with a value is a literal (InferenceCtx.literal): the plan holds n - 1 = 1; without
    # a value the error asks for the symbol.
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Slice", ["s", "zero", "one"], ["n"]),
             h.make_node("Sub", ["n", "one"], ["k"])]  # k = n - 1
    if op == "Slice":
        nodes.append(h.make_node("Slice", ["x", "zero", "big", "zero", "k"], ["y"], name="node"))
    else:
        nodes.append(h.make_node("Squeeze", ["x", "k"], ["y"], name="node"))
    model = make_model(nodes, [("x", np.float32, ["n", 1, 1])], ["y"],
                       {"zero": np.array([0]), "one": np.array([1]), "big": np.array([1 << 40])})
    compiled = _compile(model, {"n": 2})
    assert [(str(a), str(b), node) for a, b, node in compiled.constraints] == [("n - 1", "1", "node")]
    pipe = onyxia.CompilerPipeline(onyxia.core_operator_registry())
    with pytest.raises(ValueRequiredError, match="must be literal integers, got \\['n - 1'\\].*pass dims=\\{'n': N\\} "
                       "or feed x") as info:
        pipe.run_passes(onyxia.load_model(model), {"n": 1}, until=onyxia.Stage.INFERENCE, placeholders={"n"})
    assert info.value.node == "node" and info.value.symbols == {"n"}


def test_cli_compile_names_the_made_up_dims_it_needs(capsys):
    """`onyxia compile` on a paddle2onnx 0.x classifier (x: [-1, 3, "?", "?"])."""
    from pathlib import Path

    from onyxia import cli

    path = str(Path(__file__).resolve().parent.parent / "data" / "paddle" / "text_cls.legacy_dims.onnx")
    assert cli.main(["compile", path, "--dim", "x_dim0=1"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("onyxia: error: "), err
    assert "'x_dim2' (input 'x'), 'x_dim3' (input 'x') are not given" in err[0]
    assert "the model's dimensions: x_dim0, x_dim2, x_dim3" in err[0]
    assert cli.main(["compile", path, "--dim", "x_dim0=1", "--dim", "x_dim2=48", "--dim", "x_dim3=192"]) == 0
    assert "x_dim2=48" in capsys.readouterr().out
