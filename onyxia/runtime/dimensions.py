"""The dimension-update half of PlanReplay (runtime/replay.py): symbolic bindings grouped by
distinct expression, and `update_dimensions` / `set_data_symbol` moving every value that depends
on a changed symbol, rebuilding only shaders that bake it and regrowing only buffers past their
capacity.

The plan's symbolic bindings (496 in a 4-layer GPT-2 block) are grouped by distinct expression
(38 there), indexed by symbol; an update evaluates each affected expression once and scatters
its value to every place that uses it. Everything that can fail happens before any state
changes, so an error leaves the executor usable with the old dims.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onyxia.errors import DeviceError, DimensionError
from onyxia.ir.shapes import SymDim, dim_symbols
from onyxia.runtime.commands import Command, DispatchCommand
from onyxia.runtime.select import SelectCommand

# The smallest buffer a tensor gets, empty ones included: one vec4, which a kernel may bind it as.
MIN_BUFFER_BYTES = 16


@dataclass(eq=False)
class _Expression:
    """One distinct symbolic expression and every place its value goes."""

    number: int
    expr: SymDim
    fn: Any  # the compiled evaluator
    commands: list[tuple[Command, str, int]] = field(default_factory=list)
    buffers: list[str] = field(default_factory=list)  # buffers sized by it (capacity checks)
    shaders: list[int] = field(default_factory=list)  # shaders baking it (recompiled on change)
    params: bool = False  # some dispatch parameter word is this expression


def _encoded(cmd: Command) -> object:
    """What of `cmd` decides what a run encodes: a Select's chosen alternative, whether a
    dispatch's grid is empty; None for the others."""
    if isinstance(cmd, SelectCommand):
        return cmd.chosen
    return isinstance(cmd, DispatchCommand) and not all(cmd.workgroups)


class DimensionUpdates:
    """Mixin of PlanReplay: the expressions and the dimension updates (see the module doc).
    Uses the replay's model, dims, commands, programs, buffers, capacity, backend, limits,
    stats, _slots, _layouts, _build, _refresh_all / _refresh_live and _prefer_warm (WorkAhead)."""

    model: Any
    dims: dict[str, int]

    def _setup_expressions(self) -> None:
        """Group the plan's symbolic bindings by distinct expression, indexed by symbol."""
        by_expr: dict[SymDim, _Expression] = {}
        words: dict[bool, tuple[list[int], list[int]]] = {False: ([], []), True: ([], [])}  # f32? -> (pos, expr)
        for b in self.model.symbolic_bindings:
            e = by_expr.get(b.expr)
            if e is None:
                e = by_expr[b.expr] = _Expression(len(by_expr), b.expr, b.expr.compile())
            if b.kind == "buffer":
                e.buffers.append(str(b.target))
            elif b.kind == "shader":
                if int(b.target) in self._layouts:  # shaders no dispatch uses are never built
                    e.shaders.append(int(b.target))
            elif b.kind == "immediate":
                position, type_ = self.commands[int(b.target)].param_word(b.index)
                e.params = True
                pos, src = words[type_ == "f32"]
                pos.append(position)
                src.append(e.number)
            else:
                e.commands.append((self.commands[int(b.target)], b.kind, b.index))
        self._exprs = list(by_expr.values())
        self._values = [0] * len(self._exprs)  # each expression's current value (a list: cheap to compare)
        (self._param_pos, self._param_src), (self._float_pos, self._float_src) = (
            (np.array(pos, dtype=np.intp), np.array(src, dtype=np.intp)) for pos, src in words.values())
        self._by_symbol: dict[str, list[int]] = {}
        for e in self._exprs:
            for symbol in e.expr.symbols:
                self._by_symbol.setdefault(symbol, []).append(e.number)

    def _scatter_params(self) -> None:
        """Every symbolic parameter word from its expression's value, in two numpy scatters."""
        words = self.param_words
        values = np.array(self._values, dtype=np.int64)
        words[self._param_pos] = (values[self._param_src] & 0xFFFFFFFF).astype(np.uint32)
        if len(self._float_pos):
            words[self._float_pos] = values[self._float_src].astype(np.float32).view(np.uint32)

    # ---- dimensions ---------------------------------------------------------------------
    def update_dimensions(self, dims: Mapping[str, int]) -> None:
        """Change symbol values (e.g. sequence_length 8 → 1) without recompiling the plan.

        Only the distinct expressions over a changed symbol are evaluated (once each), and only
        the values that changed are scattered. Everything that can fail — bad values, broken
        constraints, sizes over the device limit, a shader that does not compile, an allocation
        — happens before the executor's state changes, so an error leaves it usable with the
        old dims. This runs once per generated token in an LLM session.
        """
        current, data_symbols = self.dims, self.model.data_symbols
        # Every value what it is already (an InferenceSession call with the shapes of the one
        # before): nothing to check or do. A data symbol still takes the error below.
        if all(type(v) is int and current.get(k) == v and k not in data_symbols for k, v in dims.items()):
            return
        new = dict(self.dims)
        for name, v in dims.items():
            if name not in self.dims:
                raise DimensionError(f"unknown dimension '{name}' (the plan's symbols: {', '.join(sorted(self.dims))})")
            if name in self.model.data_symbols:
                raise DimensionError(f"dimension '{name}' depends on the data: the model sets it while it runs")
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise DimensionError(f"dimension '{name}' must be a non-negative integer, got {v!r}")
            new[name] = int(v)
        if all(new[k] == self.dims[k] for k in dims):
            return
        for name, (fn, _) in self._bounds.items():  # data symbols take their capacity from the dims
            new[name] = max(fn(new), 0)
        changed = {k for k in new if new[k] != self.dims[k]}
        for a, b, node, fa, fb in self._constraints:
            if fa(new) != fb(new):
                what = f"dimensions {a} = {fa(new)} and {b} = {fb(new)} must be equal" if isinstance(b, SymDim) \
                    else f"dimension {a} = {fa(new)} must be {b}"
                # The symbols' values too, unless shown already: an expression's value alone does
                # not say which feed broke it.
                hidden = sorted((dim_symbols(a) | dim_symbols(b)) - {str(x) for x in (a, b)})
                given = f" (with {', '.join(f'{s}={new[s]}' for s in hidden)})" if hidden else ""
                raise DimensionError(f"{what}{given}: node '{node}' needs them equal "
                                     "(they were when the model was compiled)")
        self._apply(new, changed)
        self.stats.dimension_updates += 1

    def set_data_symbol(self, name: str, value: int) -> None:
        """A data-dependent symbol's value, read back during a run: patches the values that
        depend on it (grid sizes, parameters, copy sizes) before the steps after it are encoded,
        and grows the buffers it sizes past their capacity (nothing has written them yet)."""
        if self.dims[name] == value:
            return
        new = dict(self.dims)
        new[name] = value
        for other, (fn, symbols) in self._bounds.items():  # capacities bounded by this symbol follow it
            if name in symbols:
                new[other] = max(fn(new), 0)
        self._apply(new, {k for k in new if new[k] != self.dims[k]})

    def _apply(self, new: dict[str, int], changed: set[str]) -> None:
        """Move to the dims `new` (`changed`: the symbols whose values differ)."""
        affected = [self._exprs[i] for i in sorted({i for s in changed for i in self._by_symbol.get(s, ())})]
        # A shader baking a changed static dim is rebuilt (once, though it may bake several values).
        # Programs not built yet (a Select alternative never replayed) render with the new dims
        # when first needed.
        rebuild = {index for e in affected for index in e.shaders if index in self.programs}
        values = self._values
        exprs = [(e, v) for e, v in ((e, e.fn(new)) for e in affected) if v != values[e.number]]
        grown: dict[str, int] = {}
        for e, v in exprs:
            for name in e.buffers:
                size = max(v, MIN_BUFFER_BYTES)
                if size > self.limits.max_binding_bytes and name in self._limit_guarded:
                    continue  # only alternatives guarded by the limit bind it: none is eligible now
                if size > self.limits.max_binding_bytes:
                    raise DeviceError(f"tensor '{name}' would need {size} bytes for {new}, over this "
                                      f"device's max storage binding of {self.limits.max_binding_bytes} bytes")
                if size > self.capacity[name]:
                    grown[name] = max(size, grown.get(name, 0))
        old_dims, self.dims = self.dims, new  # programs render with the new dims
        programs: dict[int, Any] = {}
        buffers: dict[str, Any] = {}
        try:
            for index in sorted(rebuild):
                programs[index] = self._build(index)
            for name, size in grown.items():
                buffers[name] = self.backend.alloc(name, size)
        except Exception:
            for buf in buffers.values():
                self.backend.free(buf)
            self.dims = old_dims  # nothing else changed yet
            raise
        try:
            self._commit(exprs, programs, buffers, grown, changed)
        except Exception:
            self.dims = old_dims  # leave the executor as it was: usable with the old dims
            self._refresh_all()
            raise

    def _commit(self, exprs: list[tuple[_Expression, int]], programs: dict[int, Any], buffers: dict[str, Any],
                grown: dict[str, int], changed: set[str]) -> None:
        for index, program in programs.items():
            self.programs[index] = program
            for cmd in self._by_shader.get(index, ()):
                cmd.program = program
            self.stats.recompiles += 1
        for name, buf in buffers.items():  # grow past capacity: new buffer, new bind groups for its users
            self.backend.free(self.buffers[name])
            self.buffers[name] = buf
            self.capacity[name] = grown[name]
            self.stats.reallocs += 1
        if buffers:
            for cmd in self.commands:
                cmd.rebind(self, set(buffers))  # drops the bind groups of the regrown buffers' users
        dirty: dict[Command, object] = {}  # command -> what it encoded before (_encoded)
        params = False
        values = self._values
        for e, v in exprs:
            values[e.number] = v
            params = params or e.params
            for cmd, kind, index in e.commands:
                if cmd not in dirty:
                    dirty[cmd] = _encoded(cmd)
                cmd.set(kind, index, v)
        for cmd in dirty:
            cmd.settle(self)
        # Once every grid is settled: a Select that now chooses another alternative may have to
        # replay a warm stand-in (WorkAhead._prefer_warm); an unchanged choice has run already,
        # so a decode step's update does no more than before.
        for cmd, was in dirty.items():
            if isinstance(cmd, SelectCommand) and cmd.chosen != was:
                self._prefer_warm(cmd)
        if params:
            self._scatter_params()
            self.backend.params_changed()
        for slot in self._slots.values():
            if slot.symbols & changed:
                slot.refresh(self.dims)
        # What a run encodes (live_commands) changes only where a grid empties or fills or a
        # Select chooses another alternative; a decode step's new lengths change neither.
        if any(_encoded(cmd) != was for cmd, was in dirty.items()):
            self._refresh_live()
            self._new_dims = True  # the next run, the first of these choices, does nothing ahead
        elif buffers:  # new bind groups for what a run replays now; idle alternatives' when chosen
            self.build_programs(self._run_dispatches())
