"""The plan: what the compiler hands the runtime, and the contract a second replayer implements.

- model.py: CompiledModel and its records (shaders, tensors, operations, symbolic bindings), and
  the plan file (save_plan / load_plan: a zip of plan.json and one .npy per constant);
- steps.py: the step kinds (Dispatch, CopyBuffer, WriteBuffer, ReadSymbol, BranchStep, LoopStep);
- select.py: Select, the step holding alternatives with guards over dims and adapter facts;
- check.py / archive.py / invariants.py: validation of a plan file before anything trusts it;
- cost.py: bytes and flops of a run at given dims (bench, inspect; imports this package).

docs/plan-format.md is the written format: every field, the expression language of bindings
and guards, buffers and parameter transports, versioning. A plan file carries PLAN_FORMAT and
PLAN_VERSION; load_plan refuses any other version with an error naming both.
"""

from onyxia.plan.model import (
    PLAN_FORMAT,
    PLAN_VERSION,
    REUSABLE_KINDS,
    STATUS_ERROR,
    STATUS_TENSOR,
    BufferDecl,
    CompiledModel,
    PlannedOp,
    ShaderParam,
    ShaderSpec,
    SymbolicBinding,
    TensorInfo,
    load_plan,
    plan_document,
    save_plan,
)
from onyxia.plan.select import (
    ADAPTER_KINDS,
    ALWAYS,
    CLAUSE_OPS,
    FEATURES,
    LIMITS,
    NEVER,
    TRAITS,
    AdapterFacts,
    Alternative,
    Clause,
    Guard,
    Select,
    adapter,
    at_least,
    at_most,
    checks_hold,
    guard_checks,
    has_feature,
    has_trait,
    limit_at_least,
)
from onyxia.plan.steps import (
    Binding,
    BranchStep,
    CopyBuffer,
    Dispatch,
    Expr,
    LoopStep,
    ReadSymbol,
    Scalar,
    SliceCopy,
    Step,
    WriteBuffer,
    walk_steps,
)

__all__ = [
    "ADAPTER_KINDS", "ALWAYS", "CLAUSE_OPS", "FEATURES", "LIMITS", "NEVER", "PLAN_FORMAT", "PLAN_VERSION", "TRAITS",
    "REUSABLE_KINDS", "STATUS_ERROR", "STATUS_TENSOR", "AdapterFacts", "Alternative", "Binding", "BranchStep",
    "BufferDecl",
    "Clause", "CompiledModel", "CopyBuffer", "Dispatch", "Expr", "Guard", "LoopStep", "PlannedOp", "ReadSymbol",
    "Scalar", "Select", "ShaderParam", "ShaderSpec", "SliceCopy", "Step", "SymbolicBinding", "TensorInfo",
    "WriteBuffer", "adapter", "at_least", "at_most", "checks_hold", "guard_checks", "has_feature", "has_trait",
    "limit_at_least", "load_plan", "plan_document", "save_plan", "walk_steps",
]
