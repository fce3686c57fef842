"""Stand-ins that let the exporter tools import torchvision (and what imports it: transformers,
timm, diffusers) next to a CPU-only torch wheel, whose torchvision C++ ops fail to load.

Not a dependency of onyxia or its tests: imported by the tools under tools/ that run in a torch
environment (`from torch_stubs import patch_register_fake`, the tools' folder being on sys.path
when they run as scripts).
"""

from __future__ import annotations


def patch_register_fake() -> None:
    """A stub, not a fix: this environment's torchvision C ops fail to load, and torchvision's
    import registers fake (meta) kernels for them with torch.library.register_fake, which then
    raises. Swallow that RuntimeError so `import torchvision` (and timm, which imports it) works;
    the models used here never call those ops (nms, roi_align...). Call before importing either."""
    import torch.library

    if getattr(torch.library.register_fake, "_onyxia_stub", False):
        return
    orig = torch.library.register_fake

    def safe(op, *args, **kwargs):
        if args and callable(args[0]):
            try:
                return orig(op, *args, **kwargs)
            except RuntimeError:
                return args[0]

        def deco(fn):
            try:
                return orig(op, **kwargs)(fn)
            except RuntimeError:
                return fn
        return deco

    safe._onyxia_stub = True
    torch.library.register_fake = safe


__all__ = ["patch_register_fake"]
