"""How a kernel's dynamic parameters (its `Params` struct) reach it: the parameter transport.

Two transports exist: immediates (push constants, `var<immediate>`), where the device has the
feature, and a uniform buffer holding one slot per dispatch, bound with a dynamic offset. The
kernel text is the same for both; only the declaration of `params` differs here, and the wgpu
backend binds each its own way (runtime/wgpu_backend.py). Code asks the transport object instead
of comparing names.

A transport compares equal to its name, so `transport="uniform"` and
`exe.transport == "uniform"` keep working where a string was used before.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar


class Transport:
    name: ClassVar[str]

    def declaration(self) -> str:
        """The WGSL line that declares `params: Params`."""
        raise NotImplementedError

    def available(self, features: Collection[str]) -> bool:
        """Whether a device with these features can use this transport."""
        raise NotImplementedError

    def carries(self, nbytes: int, max_immediate_bytes: int) -> bool:
        """Whether one dispatch's `nbytes` of parameters fit this transport on the device."""
        raise NotImplementedError

    def slot_words(self, words: int) -> int:
        """32-bit words one dispatch's parameters occupy in the parameter memory."""
        return words

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other == self.name
        return isinstance(other, Transport) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<transport {self.name}>"


class Immediates(Transport):
    """Push constants: set per dispatch while encoding; nothing to upload when values change."""

    name = "immediate"

    def declaration(self) -> str:
        return "var<immediate> params: Params;"

    def available(self, features: Collection[str]) -> bool:
        return "immediates" in features

    def carries(self, nbytes: int, max_immediate_bytes: int) -> bool:
        return nbytes <= max_immediate_bytes


class UniformBuffer(Transport):
    """One uniform buffer, a slot per dispatch, bound at GROUP with a dynamic offset."""

    name = "uniform"
    GROUP = 1  # the bind group holding the params uniform
    # Dynamic offsets must be multiples of minUniformBufferOffsetAlignment, at most 256 bytes.
    SLOT_BYTES = 256

    def declaration(self) -> str:
        return f"@group({self.GROUP}) @binding(0) var<uniform> params: Params;"

    def available(self, features: Collection[str]) -> bool:
        return True

    def carries(self, nbytes: int, max_immediate_bytes: int) -> bool:
        return True

    def slot_words(self, words: int) -> int:
        slot = self.SLOT_BYTES // 4
        return max(1, -(-words // slot)) * slot


IMMEDIATE = Immediates()
UNIFORM = UniformBuffer()
TRANSPORTS = (IMMEDIATE, UNIFORM)


def get_transport(value: str | Transport) -> Transport:
    """The transport named `value` (or `value` itself)."""
    for transport in TRANSPORTS:
        if transport == value:
            return transport
    raise ValueError(f"transport must be one of {', '.join(t.name for t in TRANSPORTS)}, got {value!r}")


__all__ = ["IMMEDIATE", "TRANSPORTS", "UNIFORM", "Immediates", "Transport", "UniformBuffer", "get_transport"]
