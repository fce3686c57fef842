"""Staging through private arrays (codegen/wgsl.py ONYXIA_INDEXED_PRIVATE): where the runtime
turns it on, and the kernels that stage so (the register-tiled conv, the chunked product) against
onnxruntime with it forced on and off on the adapter at hand."""

from __future__ import annotations

import numpy as np
import pytest

from onyxia.runtime.device import AdapterInfo, stages_privately
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings
from tests.builders.conv import conv_model, randn
from tests.gpu.test_conv_register import CASES, check_every_alternative
from tests.helpers import compile_model, run_ort


@pytest.mark.parametrize("driver,kind,expected", [
    ("Mesa 22.3.6 (LLVM 15.0.6)", "CPU", False),
    ("Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)", "CPU", True),
    ("Mesa 26.1.0", "CPU", True),
    ("Mesa 25.0.7", "IntegratedGPU", False),  # radv, iris: not measured, the workgroup form
    ("NVIDIA 570.86", "DiscreteGPU", False),
    ("", "CPU", False),
])
def test_private_staging_where_the_driver_compiles_it_fast(driver, kind, expected):
    info = AdapterInfo("llvmpipe (LLVM 15.0.6, 256 bits)", kind, "Vulkan", "summary", "llvmpipe", driver)
    assert stages_privately(info) is expected


@pytest.fixture(scope="module", params=[True, False], ids=["private", "workgroup"])
def staging_runtime(request, runtime):
    from onyxia.runtime import Runtime

    if runtime.indexed_private == request.param:
        return runtime
    return Runtime(indexed_private=request.param)


def every_alternative(runtime, name: str) -> tuple[set[str], list[str]]:
    """The labels that ran and the register-tiled kernels' WGSL of test_conv_register's case `name`."""
    x_shape, w_shape, attrs, dims_list = CASES[name]
    codes: list[str] = []
    ran = check_every_alternative(runtime, conv_model("Conv", x_shape, w_shape, **attrs), x_shape, dims_list,
                                  codes=codes)
    return ran, codes


@pytest.mark.parametrize("name", ["pointwise_static", "rows_of_32", "strided_point"])
def test_staged_kernels_match_ort_either_way(staging_runtime, name):
    ran, codes = every_alternative(staging_runtime, name)
    assert codes and ran
    private = staging_runtime.indexed_private
    assert all(("var<private> stage:" in code) == private and ("var<workgroup> stage:" in code) != private
               for code in codes if "const RM" in code)


@pytest.mark.parametrize("name", ["depthwise", "depthwise_dilated", "depthwise_7x7"])
def test_depthwise_rows_looped_either_way(staging_runtime, name):
    # conv/depthwise_rows walks its input rows in a kept loop where the runtime stages privately
    # (Mesa 25), else runs its unrolled body, and matches onnxruntime both ways (scalar and vec4
    # rows, strides, dilations, uneven pads, partial tiles)
    ran, codes = every_alternative(staging_runtime, name)
    rows = [code for code in codes if "const RH" in code]
    assert rows and {label.split("/")[0] for label in ran} >= {"rows", "rows4"}, ran
    private = staging_runtime.indexed_private
    assert all(("kept_bound(" in code.split("fn main")[1]) == private for code in rows)


@pytest.mark.parametrize("label", ["patches+product", "window+product"])
def test_chunked_product_rows_staged_either_way(staging_runtime, label):
    # The chunked product of a strided 1x1 conv (30 output positions: 32 rows an invocation),
    # over its patches' copy or reading them out of the input, stages its rows the runtime's way
    # and matches onnxruntime.
    x_shape, w_shape, attrs, dims_list = CASES["strided_point"]
    model = conv_model("Conv", x_shape, w_shape, **attrs)
    exe = staging_runtime.load_model(compile_model(model, dims_list[0]), tuning=TuneSettings(enabled=False))
    exe.assume_adapter("cpu")
    select = next(c for c in exe.commands if isinstance(c, SelectCommand) and c.step.key.startswith("conv/"))
    exe.choose(select, select.step.labels.index(label))
    x = randn(*[dims_list[0].get(d, d) if isinstance(d, str) else d for d in x_shape])
    np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=2e-4, atol=2e-4)
    staged = [exe._render(d.shader)[1][1] for d in exe.dispatch_commands()
              if exe.model.shaders[d.shader].label == "matmul/gemv_chunked" and all(d.workgroups)]
    assert staged and all("staged_slot" in code for code in staged)
    assert all(("A_PLANE()" in code) == (label == "window+product") for code in staged)
    private = staging_runtime.indexed_private
    assert all(("var<private> staged:" in code) == private for code in staged)
