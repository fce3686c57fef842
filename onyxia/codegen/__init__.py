"""WGSL generation: template preprocessing (``onyxia.codegen.preprocess``) and the shader folder.

Nothing is re-exported here on purpose: a package attribute ``preprocess`` (the function) would
shadow the submodule ``onyxia.codegen.preprocess`` for ``import ... as`` and monkeypatching.
"""
