"""Render a ShaderSpec into final WGSL for given dimension values and parameter transport.

Kernels read every scalar parameter through an accessor function `NAME()`. The prelude
generated here defines it either as a baked constant (static params: the WGSL compiler can
unroll loops over it) or as a read of the `Params` struct (dynamic params), which lives in
immediates (`var<immediate>`, push constants) or in a uniform buffer at group 1 binding 0 (the
`Transport` object declares it). The kernel text is identical for both transports.
"""

from __future__ import annotations

import math
from typing import Mapping

from onyxia.codegen.preprocess import preprocess
from onyxia.codegen.storage import buffer_code
from onyxia.codegen.transport import IMMEDIATE, TRANSPORTS, UNIFORM, Transport
from onyxia.ir.shapes import SymDim
from onyxia.plan import ShaderParam, ShaderSpec


def literal(value: object, type_: str) -> str:
    """A WGSL literal of `type_` for a Python scalar."""
    if type_ == "f32":
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return "bitcast<f32>(0x7fc00000u)"
        if math.isinf(v):
            return "bitcast<f32>(0x7f800000u)" if v > 0 else "bitcast<f32>(0xff800000u)"
        text = repr(v)
        return text + "f" if ("." in text or "e" in text) else text + ".0f"
    if type_ == "u32":
        return f"{int(value) & 0xFFFFFFFF}u"  # type: ignore[call-overload]
    if type_ == "i32":
        v = int(value)  # type: ignore[call-overload]
        # -2147483648 has no i32 literal form: write it as an expression.
        return f"i32({v + 1}i - 1i)" if v == -(2**31) else f"{v}i"
    if type_ == "bool":
        return "true" if value else "false"
    raise ValueError(f"unknown param type {type_}")


def evaluate(value: object, dims: Mapping[str, int]) -> object:
    return value.evaluate(dims) if isinstance(value, SymDim) else value


def prelude(spec: ShaderSpec, dims: Mapping[str, int], transport: Transport) -> str:
    lines: list[str] = []
    if spec.immediates:
        fields = " ".join(f"{p.name}: {p.type}," for p in spec.immediates)
        lines.append(f"struct Params {{ {fields} }}")
        lines.append(transport.declaration())
        lines += [f"fn {p.name}() -> {p.type} {{ return params.{p.name}; }}" for p in spec.immediates]
    for p, value in spec.constants:
        lines.append(f"fn {p.name}() -> {p.type} {{ return {literal(evaluate(value, dims), p.type)}; }}")
    return "\n".join(lines) + "\n"


SUBGROUPS_DEF = "ONYXIA_SUBGROUPS"  # defined at render where the device has subgroup operations
# Also defined where its subgroups have at least 8 lanes (a workgroup of 8 invocations is one
# subgroup, so subgroupBroadcast from lanes 0-7 reaches all of it): the probed size (Runtime).
SUBGROUPS_OF_8_DEF = "ONYXIA_SUBGROUPS_OF_8"
# Defined where the driver compiles a private array indexed at run time as an array (Limits.
# indexed_private): kernels that stage their accumulators for one store loop stage them there;
# elsewhere in workgroup memory, each invocation its own slots.
INDEXED_PRIVATE_DEF = "ONYXIA_INDEXED_PRIVATE"


def resolved_defs(spec: ShaderSpec, dims: Mapping[str, int]) -> dict[str, object]:
    return {k: evaluate(v, dims) for k, v in spec.defs}


def render(spec: ShaderSpec, template: str, dims: Mapping[str, int], transport: Transport = IMMEDIATE, *,
           native_f16: bool = False, packed_f16_reads: bool = False, subgroups: bool = False,
           subgroup_size: int = 0, wide_reads: bool = False, indexed_private: bool = False) -> str:
    """Final WGSL text: the buffer bindings (codegen/storage.py; float16 as `f16` when
    `native_f16`, vec4 reads packed in words with `packed_f16_reads`, raw weight codes read as
    64-bit words with `wide_reads`), the param prelude, then
    `template` (the plan's entry for spec.template) preprocessed with the spec's defs, plus
    ONYXIA_SUBGROUPS where the device has subgroup operations (`subgroups`), and
    ONYXIA_SUBGROUPS_OF_8 where they are known to hold 8 lanes or more (`subgroup_size`, 0:
    unknown), ONYXIA_INDEXED_PRIVATE with `indexed_private`: a plan stays the same for every
    device; a template may use them under those defs."""
    defs = resolved_defs(spec, dims)
    if indexed_private:
        defs[INDEXED_PRIVATE_DEF] = True
    if subgroups:
        defs[SUBGROUPS_DEF] = True
        if subgroup_size >= 8:
            defs[SUBGROUPS_OF_8_DEF] = True
    body = preprocess(template, defs, filename=spec.label)
    bindings = buffer_code(spec.buffers, native_f16=native_f16, reports=spec.reports,
                           packed_f16_reads=packed_f16_reads, wide_reads=wide_reads)
    return bindings + prelude(spec, dims, transport) + body


def param_type(value: object) -> str:
    """The WGSL type a Python param value travels as."""
    if isinstance(value, float):
        return "f32"
    if isinstance(value, bool):
        return "u32"
    if isinstance(value, int) and value < 0:
        return "i32"
    return "u32"


__all__ = ["IMMEDIATE", "INDEXED_PRIVATE_DEF", "SUBGROUPS_DEF", "SUBGROUPS_OF_8_DEF", "UNIFORM", "TRANSPORTS",
           "ShaderParam", "Transport", "literal", "param_type", "prelude", "render"]
