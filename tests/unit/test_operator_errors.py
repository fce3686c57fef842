"""Bad operator attributes, shapes and symbols fail at compile time with errors naming the node
(no GPU needed: moved from the tests/gpu files of each operator family)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import OnyxiaError, ShapeInferenceError
from tests.builders.conv import randn
from tests.builders.dim_constraints import _model
from tests.builders.image import X, resize_model, scales, sizes
from tests.builders.matmul import matmul_model
from tests.builders.normalization_extra import C, affine, bn_params, norm_model
from tests.builders.onnx_attention import attention_model, bhsd
from tests.builders.pooling import X4
from tests.builders.selection import topk_model
from tests.helpers import compile_model, make_model


@pytest.mark.parametrize("attrs,x_shape,w_shape,message", [
    (dict(group=3), [1, 4, 5, 5], [6, 1, 3, 3], "group"),
    ({}, [1, 4, 5, 5], [6, 3, 3, 3], "C/group"),
    (dict(pads=[1, 1]), [1, 4, 5, 5], [6, 4, 3, 3], "pads"),
    (dict(auto_pad="SAME_UPPER", strides=[4, 4]), [1, 4, "h", 5], [6, 4, 3, 3], "auto_pad SAME_UPPER"),
    ({}, [1, 4, 2, 5, 5, 5], [6, 4, 1, 1, 1, 1], "spatial"),
])
def test_bad_conv_attributes_fail_clearly(attrs, x_shape, w_shape, message):
    node = h.make_node("Conv", ["x", "w"], ["y"], name="conv0", **attrs)
    model = make_model([node], [("x", np.float32, x_shape)], ["y"], {"w": randn(*w_shape)})
    with pytest.raises(OnyxiaError, match=message) as err:
        compile_model(model, {"h": 9} if "h" in x_shape else {})
    assert "conv0" in str(err.value)


def test_unequal_symbols_still_fail_to_compile():
    with pytest.raises(ShapeInferenceError, match="cannot be broadcast"):
        compile_model(_model(), {"batch": 2, "seq": 5, "mask_seq": 4})


@pytest.mark.parametrize("model,message", [
    (resize_model(["n", 2, "h", 6], sizes=sizes(3, 4), axes=[2, 3], opset=18, mode="linear", antialias=1),
     "antialias"),
    (resize_model(X, scales=scales(1, 1, 2), opset=13, mode="linear"), "entries"),
    (resize_model(X, scales=scales(1, 1, 2, 2), opset=13, mode="area"), "mode"),
    (resize_model(X, scales=scales(1, 1, 2, 2), opset=13, dtype=np.uint8, mode="linear"), "float"),
    (resize_model(X, scales=scales(1, 1, 2, 2), sizes=sizes(1, 2, 3, 4), opset=13), "exactly one"),
])
def test_unsupported_resize_fails_clearly(model, message):
    with pytest.raises(OnyxiaError, match=message) as err:
        compile_model(model, {"n": 1, "h": 5} if model.graph.input[0].type.tensor_type.shape.dim[0].dim_param else {})
    assert "resize0" in str(err.value)


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' has sizes 4 and 5"),
    ("ijk->ij", [(3, 4)], "names 3 axes but the operand has rank 2"),
    ("ij->ik", [(3, 4)], "output label 'k'"),
    ("ij->ii", [(3, 3)], "repeats a label"),
    ("i,j", [(3,)], "2 operand terms for 1 inputs"),
])
def test_einsum_bad_equations_are_clear_errors(equation, shapes, message):
    names = [f"x{i}" for i in range(len(shapes))]
    model = make_model([h.make_node("Einsum", names, ["y"], equation=equation)],
                       [(n, np.float32, s) for n, s in zip(names, shapes)], ["y"], opset=12)
    with pytest.raises(OnyxiaError, match=f"Einsum.*{message}"):
        compile_model(model)


def test_inner_dim_mismatch_names_node_and_input():
    with pytest.raises(ShapeInferenceError) as info:
        compile_model(matmul_model([2, 3, 4], [5, 6]))
    assert info.value.node == "mm" and info.value.input_index == 1
    assert "'mm'" in str(info.value) and "input 1" in str(info.value) and "K=4" in str(info.value)
    gemm = make_model([h.make_node("Gemm", ["a", "b"], ["y"], name="g", transB=1)],
                      [("a", np.float32, [2, 3]), ("b", np.float32, [3, 4])], ["y"])
    with pytest.raises(ShapeInferenceError, match="node 'g' \\(Gemm\\) input 1"):
        compile_model(gemm)


def test_batchnorm_training_is_rejected():
    model = norm_model("BatchNormalization", [2, C, 4], bn_params(C), 15, training_mode=1)
    with pytest.raises(OnyxiaError, match="training_mode") as err:
        compile_model(model)
    assert "norm0" in str(err.value)


@pytest.mark.parametrize("op,params,attrs,message", [
    ("GroupNormalization", affine(), dict(num_groups=4), "num_groups"),
    ("LpNormalization", {}, dict(p=3), "'p'"),
    ("InstanceNormalization", affine(4), {}, "scale"),
])
def test_bad_attributes_fail_clearly(op, params, attrs, message):
    with pytest.raises(OnyxiaError, match=message) as err:
        compile_model(norm_model(op, [2, C, 4], params, 21, **attrs))
    assert "norm0" in str(err.value)


@pytest.mark.parametrize("shapes,attrs,message", [
    ({"Q": (1, 3, 16), "K": (1, 3, 16), "V": (1, 3, 16)}, {}, "q_num_heads and kv_num_heads"),
    ({"Q": bhsd(1, 3, 2, 8), "K": bhsd(1, 2, 2, 8), "V": bhsd(1, 2, 2, 8)}, {}, "multiple of kv_num_heads"),
    ({"Q": bhsd(1, 2, 2, 8), "K": bhsd(1, 2, 2, 4), "V": bhsd(1, 2, 2, 8)}, {}, "K head size 4 differs"),
    ({"Q": bhsd(1, 2, 2, 8), "K": bhsd(1, 2, 2, 8), "V": bhsd(1, 2, 2, 8)}, dict(qk_matmul_output_mode=4),
     "qk_matmul_output_mode"),
    ({"Q": bhsd(1, 2, 2, 8), "K": bhsd(1, 2, 2, 8), "V": bhsd(1, 2, 2, 8), "past_key": bhsd(1, 2, 1, 8)}, {},
     "past_key and past_value"),
])
def test_invalid_attention_is_a_clear_error(shapes, attrs, message):
    with pytest.raises(OnyxiaError, match=f"Attention.*{message}"):
        compile_model(attention_model(shapes, ("Y",), **attrs))


def test_topk_k_too_large_is_a_clear_error():
    with pytest.raises(OnyxiaError, match="TopK.*exceeds the axis length"):
        compile_model(topk_model((3, 4), 5))


def test_hardmax_rejects_integers():
    model = make_model([h.make_node("Hardmax", ["x"], ["y"])], [("x", np.int32, (2, 3))], ["y"], opset=13)
    with pytest.raises(OnyxiaError, match="Hardmax.*float"):
        compile_model(model)


def test_onehot_needs_constant_depth():
    node = h.make_node("OneHot", ["i", "d", "v"], ["y"])
    model = make_model([node], [("i", np.int64, (3,)), ("d", np.int64, ())], ["y"],
                       {"v": np.array([0, 1], np.float32)}, opset=11)
    with pytest.raises(OnyxiaError, match="depth"):
        compile_model(model)


@pytest.mark.parametrize("op,attrs,message", [
    ("MaxPool", {}, "kernel_shape"),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[1]), "strides"),
    ("AveragePool", dict(kernel_shape=[9, 3]), "does not fit"),
    ("MaxPool", dict(kernel_shape=[3, 3], storage_order=2), "storage_order"),
])
def test_bad_pool_attributes_fail_clearly(op, attrs, message):
    model = make_model([h.make_node(op, ["x"], ["y"], name="pool0", **attrs)], [("x", np.float32, X4)], ["y"])
    with pytest.raises(OnyxiaError, match=message) as err:
        compile_model(model)
    assert "pool0" in str(err.value)


def test_a_pooling_window_past_the_loop_cap_is_refused_naming_the_node():
    # 256 x 256 = 65,536 window elements per output: one thread would stop short of them
    # (lavapipe's per-invocation loop cap), so the plan refuses instead of returning a wrong max.
    model = make_model([h.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[256, 256])],
                       [("x", np.float32, [1, 1, 256, 256])], ["y"])
    with pytest.raises(OnyxiaError, match=r"node 'pool' \(MaxPool\).*kernel_shape of \[256, 256\] takes 65793"):
        compile_model(model)
    compile_model(make_model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[200, 200])],
                             [("x", np.float32, [1, 1, 256, 256])], ["y"]))
