"""The realistic models of tests/models.py that the registry can run, compiled once per session:
shared by tests/gpu/test_models.py and tests/unit/test_models.py."""

from __future__ import annotations

import functools

from onyxia.operators import core_operator_registry
from tests.helpers import compile_model
from tests.models import MODELS, ModelCase

_REGISTRY = core_operator_registry()
CASES: dict[str, ModelCase] = {name: case for name, case in MODELS.items()
                               if all(need in _REGISTRY for need in case.needs)}
VIEW_OPS = ("Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity")


@functools.lru_cache(maxsize=None)
def _model(name: str):
    return CASES[name].build()


@functools.lru_cache(maxsize=None)
def _compiled(name: str):
    return compile_model(_model(name), CASES[name].compile_dims)
