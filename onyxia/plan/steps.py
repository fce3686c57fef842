"""The steps a plan's operations are made of: Dispatch, CopyBuffer, WriteBuffer, and the host-side
steps of control flow and data-dependent shapes (ReadSymbol, BranchStep, LoopStep); Select, the
step holding alternatives, is in onyxia/plan/select.py.

Each step kind is one class with its JSON form (`Step.kind(tag).from_json`), the tensors it
uses and its nested steps, so a new kind is one class here. Data only, like onyxia/plan/model.py,
whose package re-exports everything below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence, Union

from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.shapes import Dim, SymDim

Expr = Dim  # int | SymDim
Scalar = Union[int, float, SymDim]


def _enc(v: object) -> object:
    if isinstance(v, SymDim):
        return {"sym": str(v)}
    if isinstance(v, float):
        return {"f": v}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    return v


def _dec(v: object) -> object:
    if isinstance(v, dict):
        if "sym" in v:
            return parse_dim(v["sym"])
        if "f" in v:
            return float(v["f"])
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    return v


@dataclass(frozen=True)
class Binding:
    tensor: str
    read_only: bool


class Step:
    """One thing a planned operation does on the device.

    A kind of step is one subclass: it names the tensors it touches, the places where its values
    may be expressions over dynamic dims, and its plan-file form. The compiler (memory planning,
    symbolic bindings) and the plan file only talk to steps through these methods; the runtime
    maps each kind to the command that replays it.
    """

    tag: ClassVar[str]  # its "t" in the plan file
    # Written from the host at load time and on dimension changes, not in step order: memory
    # planning must keep its buffer to itself for the whole run.
    written_at_load: ClassVar[bool] = False
    _kinds: ClassVar[dict[str, type[Step]]] = {}

    def __init_subclass__(cls, tag: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if tag is not None:
            cls.tag = tag
            Step._kinds[tag] = cls

    def uses(self) -> tuple[tuple[str, bool], ...]:
        """(tensor, written?) for every tensor the step touches, in binding order."""
        raise NotImplementedError

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        """(binding kind, index, value) for every value the runtime evaluates; the symbolic
        ones become SymbolicBindings targeting this step."""
        raise NotImplementedError

    def dispatches(self) -> tuple[Dispatch, ...]:
        """The kernel launches this step makes itself (not those of steps nested in it)."""
        return ()

    def children(self) -> tuple[Step, ...]:
        """Steps nested in this one (a branch's arms, a loop's body), in replay order; they
        come right after it in `walk_steps` and in the flat step indices of SymbolicBindings."""
        return ()

    def to_json(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_json(cls, d: dict) -> Step:
        raise NotImplementedError

    @staticmethod
    def kind(tag: object) -> type[Step]:
        """The Step subclass saved as `tag` (load_plan turns the ValueError into a PlanError)."""
        kind = Step._kinds.get(tag) if isinstance(tag, str) else None
        if kind is None:
            raise ValueError(f"unknown step kind {tag!r} (known: {', '.join(sorted(Step._kinds))})")
        return kind


@dataclass(frozen=True)
class Dispatch(Step, tag="dispatch"):
    shader: int
    bindings: tuple[Binding, ...]
    workgroups: tuple[Expr, Expr, Expr]
    immediates: tuple[Scalar, ...] = ()  # one value per ShaderSpec.immediates entry

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return tuple((b.tensor, not b.read_only) for b in self.bindings)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return (*(("immediate", j, v) for j, v in enumerate(self.immediates)),
                *(("workgroups", j, v) for j, v in enumerate(self.workgroups)))

    def dispatches(self) -> tuple[Dispatch, ...]:
        return (self,)

    def to_json(self) -> dict:
        return {"t": self.tag, "shader": self.shader,
                "bindings": [[b.tensor, b.read_only] for b in self.bindings],
                "workgroups": _enc(self.workgroups), "immediates": _enc(self.immediates)}

    @classmethod
    def from_json(cls, d: dict) -> Dispatch:
        return cls(d["shader"], tuple(Binding(t, bool(r)) for t, r in d["bindings"]),
                   _dec(d["workgroups"]), _dec(d["immediates"]))


@dataclass(frozen=True)
class CopyBuffer(Step, tag="copy"):
    src: str
    dst: str
    size: Expr  # bytes
    src_offset: Expr = 0
    dst_offset: Expr = 0

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.src, False), (self.dst, True))

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return tuple(("copy", j, v) for j, v in enumerate((self.size, self.src_offset, self.dst_offset)))

    def to_json(self) -> dict:
        return {"t": self.tag, "src": self.src, "dst": self.dst, "size": _enc(self.size),
                "src_offset": _enc(self.src_offset), "dst_offset": _enc(self.dst_offset)}

    @classmethod
    def from_json(cls, d: dict) -> CopyBuffer:
        return cls(d["src"], d["dst"], _dec(d["size"]), _dec(d["src_offset"]), _dec(d["dst_offset"]))


@dataclass(frozen=True)
class WriteBuffer(Step, tag="write"):
    """Small host data (e.g. a shape tensor with symbolic entries) written before the steps run.

    The executor performs these at load time and again when dimensions change, not on every
    run: the data depends only on dimensions.
    """

    written_at_load: ClassVar[bool] = True

    dst: str
    data: tuple[Expr, ...]
    dtype: str  # ONNX dtype name of `dst`: the data is encoded as the device stores it

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.dst, True),)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return tuple(("write", j, v) for j, v in enumerate(self.data))

    def to_json(self) -> dict:
        return {"t": self.tag, "dst": self.dst, "data": _enc(self.data), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict) -> WriteBuffer:
        return cls(d["dst"], _dec(d["data"]), d["dtype"])


def walk_steps(steps: Sequence[Step]) -> list[Step]:
    """Every step in pre-order: each step, then the steps nested in it. A step's flat index in
    this list is what SymbolicBindings and the runtime's commands use."""
    out: list[Step] = []
    for s in steps:
        out.append(s)
        kids = s.children()
        if kids:
            out.extend(walk_steps(kids))
    return out


def _nested_uses(steps: Sequence[Step]) -> list[tuple[str, bool]]:
    return [u for s in steps for u in s.uses()]


@dataclass(frozen=True)
class ReadSymbol(Step, tag="read_symbol"):
    """Sets the data-dependent symbol `symbol` to element 0 of `tensor`, a count the steps
    before it computed (NonZero's number of hits, TopK's fed k, a Loop's trip count).

    The runtime submits the work encoded so far, waits for it and reads the 4 bytes back (a GPU
    sync: 0.25-0.7 ms on lavapipe, benchmarks/bench_host_control.py), then patches every value that depends on
    the symbol before it encodes the steps after this one. When `tensor` is a graph input the
    value comes from the host feed instead, with no sync. A value outside [0, limit] is an
    InputError naming the tensor.
    """

    tensor: str
    symbol: str
    limit: Expr | None = None  # the largest valid value (None: unbounded)

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.tensor, False),)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return (("read", 0, self.limit),) if self.limit is not None else ()

    def to_json(self) -> dict:
        return {"t": self.tag, "tensor": self.tensor, "symbol": self.symbol, "limit": _enc(self.limit)}

    @classmethod
    def from_json(cls, d: dict) -> ReadSymbol:
        return cls(d["tensor"], d["symbol"], _dec(d["limit"]))


@dataclass(frozen=True)
class BranchStep(Step, tag="branch"):
    """An If whose condition is only known on the device: the runtime reads the bool `cond`
    back (a GPU sync, as ReadSymbol; none when `cond` is a graph input, whose fed value is on
    the host) and replays `then` or `orelse`.

    Where the arms give outputs of different sizes, those If output dims are data symbols:
    after replaying an arm the runtime sets each symbol of that arm's `*_dims` to its value
    (an expression over the dims, counts the arm read back included). `label` is the If node."""

    cond: str
    then: tuple[Step, ...]
    orelse: tuple[Step, ...]
    then_dims: tuple[tuple[str, Expr], ...] = ()
    orelse_dims: tuple[tuple[str, Expr], ...] = ()
    label: str = ""

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.cond, False), *_nested_uses(self.then), *_nested_uses(self.orelse))

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return tuple(("branch", j, v) for j, (_, v) in enumerate((*self.then_dims, *self.orelse_dims)))

    def children(self) -> tuple[Step, ...]:
        return (*self.then, *self.orelse)

    def to_json(self) -> dict:
        return {"t": self.tag, "cond": self.cond, "then": [s.to_json() for s in self.then],
                "orelse": [s.to_json() for s in self.orelse],
                "then_dims": [[k, _enc(v)] for k, v in self.then_dims],
                "orelse_dims": [[k, _enc(v)] for k, v in self.orelse_dims], "label": self.label}

    @classmethod
    def from_json(cls, d: dict) -> BranchStep:
        def dims(rows: list) -> tuple[tuple[str, Expr], ...]:
            return tuple((str(k), _dec(v)) for k, v in rows)
        return cls(d["cond"], _steps(d["then"]), _steps(d["orelse"]), dims(d.get("then_dims", [])),
                   dims(d.get("orelse_dims", [])), d.get("label", ""))


@dataclass(frozen=True)
class SliceCopy:
    """A copy inside a loop whose byte offsets move with the iteration i:
    src[src_offset + i * src_stride : +size] -> dst[dst_offset + i * dst_stride : +size]."""

    src: str
    dst: str
    size: Expr
    src_offset: Expr = 0
    src_stride: Expr = 0
    dst_offset: Expr = 0
    dst_stride: Expr = 0

    def values(self) -> tuple[Expr, ...]:
        return (self.size, self.src_offset, self.src_stride, self.dst_offset, self.dst_stride)


@dataclass(frozen=True)
class LoopStep(Step, tag="loop"):
    """Loop and Scan: the runtime replays `body` on the host, up to `trip_count` times.

    Before the loop, a false `first` (a bool tensor read back; None: true) skips it. Each
    iteration copies the iteration number into `counter` (an int32 scalar, from an index table
    the runtime keeps: no kernel), runs the `enter` copies (scan-input slices), the body, then the
    `leave` copies (scan-output slices, carried state); then a false `cond` (the body's condition,
    read back: one GPU sync per iteration, made only when the condition is not known to stay
    true) ends the loop. Copy offsets are recorded as each iteration is encoded, so a loop
    without readbacks costs no sync at all: its iterations go into the run's one submission.
    After the loop the data symbol `iterations` (if any) is set to the number that ran.
    """

    body: tuple[Step, ...]
    trip_count: Expr
    cond: str | None = None
    first: str | None = None
    counter: str | None = None
    enter: tuple[SliceCopy, ...] = ()
    leave: tuple[SliceCopy, ...] = ()
    iterations: str | None = None
    label: str = ""  # the node, for errors

    def uses(self) -> tuple[tuple[str, bool], ...]:
        copies = [u for c in (*self.enter, *self.leave) for u in ((c.src, False), (c.dst, True))]
        own = [(t, w) for t, w in ((self.cond, False), (self.first, False), (self.counter, True)) if t is not None]
        return (*own, *copies, *_nested_uses(self.body))

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        values = (self.trip_count, *(v for c in (*self.enter, *self.leave) for v in c.values()))
        return tuple(("loop", j, v) for j, v in enumerate(values))

    def children(self) -> tuple[Step, ...]:
        return self.body

    def to_json(self) -> dict:
        def copies(cs: tuple[SliceCopy, ...]) -> list:
            return [[c.src, c.dst, *(_enc(v) for v in c.values())] for c in cs]
        return {"t": self.tag, "body": [s.to_json() for s in self.body], "trip_count": _enc(self.trip_count),
                "cond": self.cond, "first": self.first, "counter": self.counter, "enter": copies(self.enter),
                "leave": copies(self.leave), "iterations": self.iterations, "label": self.label}

    @classmethod
    def from_json(cls, d: dict) -> LoopStep:
        def copies(rows: list) -> tuple[SliceCopy, ...]:
            return tuple(SliceCopy(r[0], r[1], *(_dec(v) for v in r[2:])) for r in rows)
        return cls(_steps(d["body"]), _dec(d["trip_count"]), d["cond"], d["first"], d["counter"], copies(d["enter"]),
                   copies(d["leave"]), d["iterations"], d["label"])


def _steps(rows: list) -> tuple[Step, ...]:
    return tuple(Step.kind(r["t"]).from_json(r) for r in rows)
