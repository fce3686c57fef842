"""Runtime: wgpu-native's struct types resolved without re-parsing its C header each time.

wgpu-py builds every descriptor with `ffi.new("WGPUXxxDescriptor *")`. cffi resolves such a
type string once per process by parsing it with pycparser *together with one typedef line for
every type the header declared* (~430 for wgpu-native), ~15 ms a string on this 2-core VM: the
~40 distinct strings a model's load uses cost 0.6 s of a warm second process's ~1.5 s (measured:
40 `ffi.typeof` calls 0.62 s, mobilenet_v3_large's warm load 1.43 s). A string of the form
"Name", "Name *" or "Name[]" where Name is a declared typedef (or a one-word primitive type)
means exactly that type, the pointer to it or an array of it, which is what `short_cut` builds
from cffi's own declaration table; every other string (the three callback signatures) takes
cffi's parser as before. tests/unit/test_ffi_types.py checks that both give
the same type for every typedef of the header.
"""

from __future__ import annotations

import re

_SHORT = re.compile(r"\s*(\w+)\s*(\*|\[\s*\])?\s*")


def short_cut(parser, cdecl: str):
    """(type, quals) for `cdecl` when it is "Name", "Name *" or "Name[]" over a typedef the
    parser has declared or a one-word primitive type ("int", "uint8_t"), else None."""
    match = _SHORT.fullmatch(cdecl)
    if match is None:
        return None
    from cffi import model

    name = match.group(1)
    found = parser._declarations.get("typedef " + name)
    if found is None:
        if name not in model.PrimitiveType.ALL_PRIMITIVE_TYPES:
            return None
        found = model.PrimitiveType(name), 0
    tp, quals = found
    if match.group(2) is None:
        return tp, quals
    if match.group(2) == "*":
        if isinstance(tp, model.RawFunctionType):
            return None
        return model.PointerType(tp, quals), 0
    return model.ArrayType(tp, None), quals


def install(ffi) -> bool:
    """Route `ffi`'s type parsing through short_cut first; False (nothing changed) where this
    cffi lays out its parser differently than 1.15-2.x do."""
    parser = getattr(ffi, "_parser", None)
    if parser is None or not isinstance(getattr(parser, "_declarations", None), dict):
        return False
    parse = getattr(parser, "parse_type_and_quals", None)
    if parse is None or getattr(parse, "_onyxia", False):
        return parse is not None

    def parse_type_and_quals(cdecl):
        return short_cut(parser, cdecl) or parse(cdecl)

    parse_type_and_quals._onyxia = True
    parser.parse_type_and_quals = parse_type_and_quals
    return True


def install_for_wgpu() -> bool:
    try:
        from wgpu.backends.wgpu_native._ffi import ffi
    except ImportError:  # another wgpu backend: nothing to speed up
        return False
    return install(ffi)


__all__ = ["install", "install_for_wgpu", "short_cut"]
