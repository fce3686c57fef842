"""Preprocessed templates are valid WGSL: naga (through wgpu) accepts them."""

from __future__ import annotations

import textwrap

import pytest

from onyxia.codegen.preprocess import load_shader, preprocess, resolve_shader_import

pytestmark = pytest.mark.gpu

wgpu = pytest.importorskip("wgpu")

# A kernel exercising every substitution type, else-chains and the shared helper import.
TEMPLATE = textwrap.dedent("""
    #import common::grid

    @group(0) @binding(0) var<storage, read> src: array<#{T}>;
    @group(0) @binding(1) var<storage, read_write> dst: array<#{T}>;

    const SCALE: f32 = #{SCALE};
    const USE_BIAS: bool = #{USE_BIAS};

    @compute @workgroup_size(#{WG})
    fn main(wg: Grid) {
        let i = grid_group(wg) * #{WG}u + wg.lid;
        if (i >= arrayLength(&src)) {
            return;
        }
        var x = f32(src[i]) * SCALE;
    #if MODE == 0
        x = x + 1.0;
    #else if MODE == 1
        x = max(x, 0.0);
    #else
        x = #{EXPR};
    #endif
    #ifdef USE_BIAS
        if (USE_BIAS) { x = x - 0.5; }
    #endif
        dst[i] = #{T}(x);
    }
""")


@pytest.fixture(scope="module")
def gpu_device(wgpu_adapter):
    # The conftest fixture asserts a real adapter (and fails, not skips, in CI).
    return wgpu_adapter.request_device_sync()


@pytest.mark.parametrize(
    "defs",
    [
        {"T": "f32", "SCALE": 0.5, "USE_BIAS": True, "WG": 64, "MODE": 0},
        {"T": "f32", "SCALE": 1e-05, "USE_BIAS": False, "WG": 256, "MODE": 1},
        {"T": "i32", "SCALE": 3.0, "USE_BIAS": False, "WG": 128, "MODE": 2, "EXPR": "x * x"},
        {"T": "u32", "SCALE": 2.5e20, "USE_BIAS": True, "WG": 32, "MODE": 2, "EXPR": "abs(x)"},
    ],
)
def test_preprocessed_template_is_valid_wgsl(gpu_device, defs):
    code = preprocess(TEMPLATE, defs, filename="test.wgsl", resolve_import=resolve_shader_import)
    gpu_device.create_shader_module(code=code)


def test_validation_rejects_bad_substitution(gpu_device):
    # Proves the check above has teeth: a float where a u32 workgroup size belongs fails.
    code = preprocess(TEMPLATE, {"T": "f32", "SCALE": 1.0, "USE_BIAS": False, "WG": 1.5,
                                 "MODE": 0}, resolve_import=resolve_shader_import)
    with pytest.raises(wgpu.GPUValidationError):
        gpu_device.create_shader_module(code=code)


def test_shared_helpers_are_valid_wgsl(gpu_device):
    source = load_shader("common/grid.wgsl")
    gpu_device.create_shader_module(code=preprocess(source, {}, resolve_import=resolve_shader_import))
