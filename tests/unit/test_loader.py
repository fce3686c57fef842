"""ONNX loader: sources, external data, opsets, symbolic dims, weights and clear load errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.errors import ModelLoadError
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.graph import TensorKind
from onyxia.ir.shapes import SymDim
from tests.helpers import IR_VERSION, make_model


def simple_model() -> onnx.ModelProto:
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"), h.make_node("Relu", ["m"], ["y"], name="relu")]
    return make_model(nodes, [("x", np.float32, ["batch", 4])], ["y"], {"w": w})


def symbols_of(shape) -> list:
    return [str(d) if isinstance(d, SymDim) else d for d in shape]


@pytest.mark.parametrize("kind", ["path", "str", "bytes", "proto"])
def test_load_from_path_bytes_and_proto(tmp_path, kind):
    model = simple_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    source = {"path": path, "str": str(path), "bytes": model.SerializeToString(), "proto": model}[kind]
    g = onyxia.load_model(source)
    assert g.inputs == ["x"] and g.outputs == ["y"]
    assert [n.op_type for n in g.nodes] == ["MatMul", "Relu"]
    assert [n.name for n in g.nodes] == ["mm", "relu"]
    np.testing.assert_array_equal(g.tensor("w").value, onnx.numpy_helper.to_array(model.graph.initializer[0]))


def test_external_data_is_loaded(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    model = make_model([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["y"])],
                       [("x", np.float32, [1, 64])], ["y"], {"w": w, "b": b})
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size >= w.nbytes + b.nbytes
    stored = onnx.load(path, load_external_data=False)
    assert all(init.data_location == TensorProto.EXTERNAL for init in stored.graph.initializer)
    g = onyxia.load_model(path)
    np.testing.assert_array_equal(g.tensor("w").value, w)
    np.testing.assert_array_equal(g.tensor("b").value, b)


def test_missing_external_data_file_is_a_model_load_error(tmp_path):
    model = make_model([h.make_node("Add", ["x", "w"], ["y"])], [("x", np.float32, [8])], ["y"],
                       {"w": np.ones(8, np.float32)})
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="gone.bin", size_threshold=0)
    (tmp_path / "gone.bin").unlink()
    with pytest.raises(ModelLoadError, match="ext.onnx"):
        onyxia.load_model(path)


def test_opsets_per_domain_including_com_microsoft():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, [2])], ["y"], opset=17,
                       extra_opsets={"com.microsoft": 1, "ai.onnx.ml": 3})
    g = onyxia.load_model(model)
    assert g.opsets == {"": 17, "com.microsoft": 1, "ai.onnx.ml": 3}


def test_ai_onnx_domain_is_the_default_domain():
    model = make_model([h.make_node("Relu", ["x"], ["y"], domain="ai.onnx")], [("x", np.float32, [2])], ["y"])
    model.opset_import[0].domain = "ai.onnx"
    g = onyxia.load_model(model)
    assert g.opsets[""] == 18
    assert next(g.nodes).domain == ""


def test_contrib_node_keeps_its_domain():
    model = make_model([h.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft", name="fg")],
                       [("x", np.float32, [2])], ["y"], extra_opsets={"com.microsoft": 1})
    node = next(onyxia.load_model(model).nodes)
    assert (node.domain, node.op_type, node.name) == ("com.microsoft", "FastGelu", "fg")


def test_dim_params_become_symbols_and_expressions_are_parsed():
    model = make_model([h.make_node("Relu", ["x"], ["y"])],
                       [("x", np.float32, ["batch", "sequence_length * num_heads", 64, "past + 1"])], ["y"])
    g = onyxia.load_model(model)
    batch, prod, static, past = g.tensor("x").shape
    assert batch == SymDim.symbol("batch")
    assert isinstance(prod, SymDim) and prod.symbols == {"sequence_length", "num_heads"}
    assert prod == SymDim.symbol("sequence_length") * SymDim.symbol("num_heads")
    assert prod.evaluate({"sequence_length": 7, "num_heads": 3}) == 21
    assert static == 64 and type(static) is int
    assert past - 1 == SymDim.symbol("past")
    assert g.tensor("x").dtype.name == "float32" and g.tensor("x").kind is TensorKind.INPUT


def test_missing_dims_become_fresh_named_symbols():
    x = h.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, None])
    z = h.make_tensor_value_info("z", TensorProto.FLOAT, [None])
    model = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"]), h.make_node("Neg", ["z"], ["w"])],
                                      "g", [x, z], [h.make_empty_tensor_value_info("y"),
                                                    h.make_empty_tensor_value_info("w")]),
                         opset_imports=[h.make_opsetid("", 18)], ir_version=IR_VERSION)
    g = onyxia.load_model(model)
    d0, d1, d2 = g.tensor("x").shape
    (z0,) = g.tensor("z").shape
    assert d1 == 3
    names = [next(iter(d.symbols)) for d in (d0, d2, z0)]
    assert all(isinstance(d, SymDim) for d in (d0, d2, z0))
    assert len(set(names)) == 3, "each missing dim needs its own symbol"
    assert all(n for n in names)
    # The caller can bind them by name at compile time.
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(g, dict.fromkeys(names, 2))
    assert set(compiled.dims) == set(names)


def _raw_input(name: str, dims: list) -> onnx.ValueInfoProto:
    """An input whose dims are written field by field, as converters do: int -> dim_value (also
    negative), str -> dim_param (also "" and "?"), None -> a dim entry with neither field."""
    vi = h.make_tensor_value_info(name, TensorProto.FLOAT, [])
    for d in dims:
        dim = vi.type.tensor_type.shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d
    return vi


def _raw_model(inputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    nodes = [h.make_node("Relu", [vi.name], [f"{vi.name}_out"]) for vi in inputs]
    outs = [h.make_empty_tensor_value_info(f"{vi.name}_out") for vi in inputs]
    return h.make_model(h.make_graph(nodes, "g", inputs, outs), opset_imports=[h.make_opsetid("", 18)],
                        ir_version=IR_VERSION)


def test_unnamed_dynamic_dims_as_converters_write_them_become_fresh_symbols():
    """paddle2onnx writes x: [-1, 3, "?", "?"]: -1, "?", "" and an empty dim entry all mean "dynamic,
    no name". Each gets its own symbol `<input>_dim<axis>` (two "?" are not one dim)."""
    model = _raw_model([_raw_input("x", [-1, 3, "?", "?"]), _raw_input("y", [-7, "", None, 0])])
    g = onyxia.load_model(model)
    assert symbols_of(g.tensor("x").shape) == ["x_dim0", 3, "x_dim2", "x_dim3"]
    assert symbols_of(g.tensor("y").shape) == ["y_dim0", "y_dim1", "y_dim2", 0]


def test_fresh_dim_names_are_identifiers_and_avoid_the_models_own_names():
    # "input.1" (torch) and "x:0" (tf2onnx) are not identifiers; a dim_param may already be x_dim0.
    model = _raw_model([_raw_input("input.1", [-1]), _raw_input("x:0", [-1, "x_0_dim1", None])])
    g = onyxia.load_model(model)
    assert symbols_of(g.tensor("input.1").shape) == ["input_1_dim0"]
    assert symbols_of(g.tensor("x:0").shape) == ["x_0_dim0", "x_0_dim1", "x_0_dim2"]
    model = _raw_model([_raw_input("x", [-1, "x_dim0"])])
    first, second = onyxia.load_model(model).tensor("x").shape
    assert str(second) == "x_dim0" and str(first) != "x_dim0"
    # Names survive the text round trip plans use for expressions.
    d = onyxia.load_model(_raw_model([_raw_input("input.1", [-1])])).tensor("input.1").shape[0]
    assert parse_dim(str(d * 2 + 1)) == d * 2 + 1


def test_a_missing_dimension_error_lists_every_missing_name_and_the_models_names():
    from onyxia.errors import DimensionError

    g = onyxia.load_model(_raw_model([_raw_input("x", [-1, 3, "?", "?"])]))
    pipeline = onyxia.CompilerPipeline(onyxia.core_operator_registry())
    with pytest.raises(DimensionError) as info:
        pipeline.compile(g, {"x_dim0": 1})
    msg = str(info.value)
    assert "'x_dim2' (input 'x')" in msg and "'x_dim3' (input 'x')" in msg
    assert "--dim x_dim2=N --dim x_dim3=N" in msg and "x_dim0, x_dim2, x_dim3" in msg
    compiled = pipeline.compile(g, {"x_dim0": 1, "x_dim2": 4, "x_dim3": 5})
    assert compiled.dims == {"x_dim0": 1, "x_dim2": 4, "x_dim3": 5}


def test_initializers_and_constant_nodes_become_weights():
    nodes = [h.make_node("Constant", [], ["c"], value=h.make_tensor("v", TensorProto.FLOAT, [2], [1.5, -2.0])),
             h.make_node("Constant", [], ["ci"], value_ints=[3, 4]),
             h.make_node("Constant", [], ["cf"], value_float=0.25),
             h.make_node("Add", ["x", "c"], ["a"]),
             h.make_node("Mul", ["a", "w"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [2])], ["y"], {"w": np.array([2, 3], np.float32)})
    g = onyxia.load_model(model)
    assert [n.op_type for n in g.nodes] == ["Add", "Mul"], "Constant nodes leave no node behind"
    for name, expected in (("c", np.array([1.5, -2.0], np.float32)), ("ci", np.array([3, 4], np.int64)),
                           ("cf", np.float32(0.25)), ("w", np.array([2, 3], np.float32))):
        t = g.tensor(name)
        assert t.kind is TensorKind.WEIGHT
        assert t.value is not None and t.value.dtype == np.asarray(expected).dtype
        np.testing.assert_array_equal(t.value, expected)
        assert t.shape == np.asarray(expected).shape
        assert t.dtype.numpy == np.asarray(expected).dtype


def test_graph_inputs_that_are_initializers_are_weights():
    model = make_model([h.make_node("Add", ["x", "bias"], ["y"])], [("x", np.float32, [3]), ("bias", np.float32, [3])],
                       ["y"], {"bias": np.array([1, 2, 3], np.float32)})
    g = onyxia.load_model(model)
    assert g.inputs == ["x"]
    assert g.tensor("bias").kind is TensorKind.WEIGHT
    np.testing.assert_array_equal(g.tensor("bias").value, [1, 2, 3])


def test_truncated_file_is_a_model_load_error(tmp_path):
    data = simple_model().SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError) as info:
        onyxia.load_model(path)
    assert "truncated.onnx" in str(info.value)


@pytest.mark.parametrize("data", [b"\xff\xfe this is not protobuf \x00\x01" * 8, b"", b"\x00" * 3],
                         ids=["garbage", "empty", "zeros"])
def test_garbage_bytes_are_a_model_load_error(data, tmp_path):
    with pytest.raises(ModelLoadError):
        onyxia.load_model(data)
    path = tmp_path / "garbage.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError):
        onyxia.load_model(path)


def test_missing_file_is_a_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        onyxia.load_model(tmp_path / "nope.onnx")


def test_dangling_tensor_reference_names_node_and_tensor():
    model = make_model([h.make_node("Add", ["x", "ghost"], ["y"], name="adder")], [("x", np.float32, [2])], ["y"])
    with pytest.raises(ModelLoadError) as info:
        onyxia.load_model(model)
    assert "adder" in str(info.value) and "ghost" in str(info.value)


def test_dangling_graph_output_is_named():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, [2])], ["y", "phantom"])
    with pytest.raises(ModelLoadError, match="phantom"):
        onyxia.load_model(model)


def test_cycle_is_a_model_load_error_naming_nodes():
    nodes = [h.make_node("Add", ["x", "b"], ["a"], name="loop_a"), h.make_node("Relu", ["a"], ["b"], name="loop_b"),
             h.make_node("Neg", ["a"], ["y"], name="tail")]
    model = make_model(nodes, [("x", np.float32, [2])], ["y"])
    with pytest.raises(ModelLoadError) as info:
        onyxia.load_model(model)
    assert "cycle" in str(info.value) and "loop_a" in str(info.value) and "loop_b" in str(info.value)


def test_tensor_produced_twice_is_named():
    nodes = [h.make_node("Relu", ["x"], ["y"], name="one"), h.make_node("Neg", ["x"], ["y"], name="two")]
    with pytest.raises(ModelLoadError, match="'y'.*one.*two"):
        onyxia.load_model(make_model(nodes, [("x", np.float32, [2])], ["y"]))


def test_malformed_dim_param_expression_names_the_input():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["batch ** 2"])], ["y"])
    with pytest.raises(ModelLoadError, match="input 'x'"):
        onyxia.load_model(model)


def test_glued_names_are_single_symbols():
    assert parse_dim("batch-size") == SymDim.symbol("batch-size")
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["batch-size", "enc.seq"])], ["y"])
    assert symbols_of(onyxia.load_model(model).tensor("x").shape) == ["batch-size", "enc.seq"]


def test_absent_optional_outputs_in_several_nodes():
    """"" marks an absent optional output; two nodes doing so must not clash (every decoder layer's
    SkipSimplifiedLayerNormalization writes ["out", "", "", "residual"])."""
    nodes = [h.make_node("LayerNormalization", ["x", "s"], ["y1", "", "inv1"], name="ln1"),
             h.make_node("LayerNormalization", ["y1", "s"], ["y2", "", "inv2"], name="ln2")]
    model = make_model(nodes, [("x", np.float32, ["n", 4])], ["y2", "inv1", "inv2"], {"s": np.ones(4, np.float32)})
    g = onyxia.load_model(model)
    ln1, ln2 = g.nodes
    assert len(ln1.outputs) == len(ln2.outputs) == 3, "positions of later outputs are kept"
    assert ln1.outputs[2] == "inv1" and ln2.outputs[2] == "inv2"
    assert ln1.outputs[1] != ln2.outputs[1] and "" not in g.tensors
    assert ln1.outputs[1] not in g.outputs
