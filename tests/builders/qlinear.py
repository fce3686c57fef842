"""Builders shared by tests/gpu/test_qlinear.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as h

from tests.helpers import make_model

MS = "com.microsoft"


U8, I8 = np.uint8, np.int8


def qvalues(rng, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def scalar(value, dtype) -> np.ndarray:
    return np.array(value, dtype)


def qlinear_matmul_model(ta, tb, k, n, per_column: bool, rng, opset=10, m="m"):
    inits = {"a_scale": scalar(0.02, np.float32), "a_zp": qvalues(rng, ta, ()),
             "b_scale": (rng.random(n) * 0.05 + 0.01).astype(np.float32) if per_column else scalar(0.03, np.float32),
             "b_zp": qvalues(rng, tb, (n,) if per_column else ()),
             "y_scale": scalar(0.7, np.float32), "y_zp": qvalues(rng, ta, ())}
    node = h.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"], ["y"])
    return make_model([node], [("a", ta, [m, k]), ("b", tb, [k, n])], ["y"], inits, opset=opset)


def ms_model(op, inputs, input_specs, inits, **attrs):
    return make_model([h.make_node(op, inputs, ["y"], domain=MS, **attrs)], input_specs, ["y"], inits,
                      extra_opsets={MS: 1})


def validation_models() -> list[tuple[onnx.ModelProto, dict[str, int]]]:
    """Models covering every quantized op, for tests/gpu/test_shader_validation.py."""
    rng = np.random.default_rng(0)
    m = {"m": 3}
    models = [(qlinear_matmul_model(U8, I8, 16, 4, True, rng), m)]
    models.append((make_model([h.make_node("MatMulInteger", ["a", "b", "azp"], ["y"])], [("a", U8, ["m", 8])], ["y"],
                              {"b": qvalues(rng, I8, (8, 3)), "azp": scalar(3, U8)}), m))
    conv_inits = {"w": qvalues(rng, U8, (4, 3, 3, 3)), "xzp": scalar(5, U8), "xs": scalar(0.1, np.float32),
                  "ws": scalar(0.1, np.float32), "wzp": scalar(2, U8), "ys": scalar(0.2, np.float32),
                  "yzp": scalar(9, U8)}
    models.append((make_model([h.make_node("ConvInteger", ["x", "w", "xzp"], ["y"])], [("x", U8, ["m", 3, 5, 5])],
                              ["y"], conv_inits), m))
    q_conv = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"]
    for domain in ("", MS):
        models.append((make_model([h.make_node("QLinearConv", q_conv, ["y"], domain=domain)],
                                  [("x", U8, ["m", 3, 5, 5])], ["y"], conv_inits, extra_opsets={MS: 1}), m))
    models.append((make_model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
                               h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)],
                              [("x", np.float32, ["m", 4])], ["y"], {"s": np.full(4, 0.1, np.float32),
                                                                     "z": np.full(4, 3, U8)}, opset=21), m))
    models.append((make_model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS),
                               h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain=MS)],
                              [("x", np.float32, ["m", 4])], ["y"], {"s": scalar(0.1, np.float32), "z": scalar(3, U8)},
                              extra_opsets={MS: 1}), m))
    models.append((make_model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                              [("x", np.float32, ["m", 4])], ["y", "s", "z"], opset=11), m))
    prod = {"b": qvalues(rng, I8, (8, 3)), "as": scalar(0.1, np.float32), "bs": scalar(0.1, np.float32),
            "bzp": scalar(0, I8), "azp": scalar(1, U8), "ys": scalar(0.3, np.float32), "yzp": scalar(4, U8)}
    for node, a_type in ((h.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "azp", "bzp"], ["y"], domain=MS),
                          U8),
                         (h.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bzp"], ["y"], domain=MS), np.float32),
                         (h.make_node("QGemm", ["a", "as", "azp", "b", "bs", "bzp", "", "ys", "yzp"], ["y"],
                                      domain=MS), U8)):
        models.append((make_model([node], [("a", a_type, ["m", 8])], ["y"], prod, extra_opsets={MS: 1}), m))
    elem = {"as": scalar(0.1, np.float32), "azp": scalar(3, U8), "bs": scalar(0.2, np.float32),
            "bzp": scalar(5, U8), "cs": scalar(0.3, np.float32), "czp": scalar(7, U8)}
    for op in ("QLinearAdd", "QLinearMul"):
        models.append((ms_model(op, ["a", "as", "azp", "b", "bs", "bzp", "cs", "czp"], [("a", U8, ["m", 4]),
                                ("b", U8, [4])], elem), m))
    unary = {"xs": scalar(0.1, np.float32), "xzp": scalar(3, U8), "ys": scalar(0.2, np.float32),
             "yzp": scalar(5, U8)}
    for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.2}), ("QLinearSoftmax", {"axis": -1}),
                      ("QLinearAveragePool", {"kernel_shape": [2, 2]}), ("QLinearGlobalAveragePool", {})):
        models.append((ms_model(op, ["x", "xs", "xzp", "ys", "yzp"], [("x", U8, ["m", 2, 4, 4])], unary, **attrs), m))
    concat = {"ys": scalar(0.1, np.float32), "yzp": scalar(128, U8), "s1": scalar(0.05, np.float32),
              "z1": scalar(100, U8)}
    models.append((ms_model("QLinearConcat", ["ys", "yzp", "x1", "s1", "z1", "x2", "s1", "z1"],
                            [("x1", U8, ["m", 3]), ("x2", U8, ["m", 2])], concat, axis=1), m))
    return models
