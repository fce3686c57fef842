"""The `onyxia` command: compile | run | inspect | bench | tune | web | generate.

User errors print one line (`onyxia: error: ...`) and exit non-zero; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from onyxia.cli_feeds import feeds_for, index_bounds
from onyxia.errors import CliError, DimensionError, OnyxiaError

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 2


def _parse_dims(items: Sequence[str] | None) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise DimensionError(f"--dim expects NAME=VALUE, got '{item}'")
        try:
            dims[name.strip()] = int(value)
        except ValueError:
            raise DimensionError(f"--dim {name}: '{value}' is not an integer") from None
    return dims


def _progress(label: str, done: int, total: int) -> None:
    """A one-line progress bar on stderr (only when it is a terminal)."""
    if not sys.stderr.isatty() or total <= 0:
        return
    width = 28
    filled = width * done // total
    sys.stderr.write(f"\r{label:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\r" + " " * (width + 30) + "\r")
    sys.stderr.flush()


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _compile(model_path: str, dims: dict[str, int], static: Sequence[str], decoder: str | None = None):
    import onyxia
    from onyxia.compiler import CompilerPipeline

    if Path(model_path).is_dir():  # an LLM folder (genai_config.json or config.json + model.onnx)
        from onyxia.llm.compile import compile_folder

        return None, compile_folder(model_path, dims.pop("max_length", None), report=_progress,
                                    decoder=decoder).compiled
    if decoder:
        raise CliError(f"--decoder {decoder}: chooses the ONNX file of an LLM folder, but {model_path} is a file")
    graph = onyxia.load_model(model_path)
    pipeline = CompilerPipeline(onyxia.core_operator_registry())
    return graph, pipeline.compile(graph, dims, static,
                                   progress=lambda rec, done, total: _progress("compiling", done, total))


def _by_storage(compiled, tensors) -> tuple[int, str]:
    """(total device bytes, "f16 1.2 MiB, i32 4.0 KiB" with each storage's bytes per element)."""
    from onyxia.ir.dtypes import from_name
    from onyxia.ir.shapes import evaluate_dim

    sizes: dict[str, int] = {}
    for t in tensors:
        key = f"{t.storage} ({from_name(t.dtype).bits / 8:g} B)"
        sizes[key] = sizes.get(key, 0) + int(evaluate_dim(t.nbytes, compiled.dims))
    parts = ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]))
    return sum(sizes.values()), parts


def _summary(compiled) -> list[str]:
    from onyxia.plan.show import run_count

    md = compiled.metadata
    tensors = compiled.tensors.values()
    weights, weight_parts = _by_storage(compiled, [t for t in tensors if t.data is not None])
    activation, activation_parts = _by_storage(compiled, [
        t for t in tensors
        if t.alias_of is None and t.kind in ("intermediate", "output", "scratch") and t.data is None])
    io, io_parts = _by_storage(compiled, [compiled.tensors[n] for n in dict.fromkeys((*compiled.inputs,
                                                                                          *compiled.outputs))])
    runs = run_count(compiled)
    symbols = ", ".join(f"{k}={v}{' (static)' if k in compiled.static_symbols else ''}"
                        for k, v in sorted(compiled.dims.items())) or "none"
    return [
        f"nodes:            {md.get('nodes', 0)} ({md.get('folded_nodes', 0)} folded, "
        f"{md.get('planned_nodes', 0)} planned)",
        f"dispatches:       {compiled.num_dispatches} planned (every Select alternative), "
        f"{runs['cpu']} run at the dims given on a CPU-type adapter, {runs['gpu']} on a GPU-type one",
        f"steps:            {len(compiled.steps)}",
        f"distinct shaders: {len(compiled.shaders)}",
        f"weights:          {_fmt_bytes(weights)} on the device ({weight_parts or 'none'})",
        f"activations:      {_fmt_bytes(activation)} at the dims given ({activation_parts or 'none'})",
        f"inputs, outputs:  {_fmt_bytes(io)} at the dims given ({io_parts or 'none'})",
        f"symbols:          {symbols}",
        f"symbolic bindings:{len(compiled.symbolic_bindings):>5}",
    ]


def _check_output_path(output: str) -> None:
    """Refuse an output path that cannot be written before spending time compiling."""
    path = Path(output)
    if path.is_dir():
        raise CliError(f"-o {output}: is a directory; give a file name such as {path / 'model.onyxia'}")
    if not path.parent.is_dir():
        raise CliError(f"-o {output}: directory '{path.parent}' does not exist")


def cmd_compile(args: argparse.Namespace) -> int:
    if args.output:
        _check_output_path(args.output)
    _graph, compiled = _compile(args.model, _parse_dims(args.dim), args.static or (), args.decoder)
    from onyxia.plan.cost import cost_summary
    from onyxia.plan.show import select_lines

    print(f"compiled {args.model}")
    for line in (*_summary(compiled), *cost_summary(compiled), *select_lines(compiled)):
        print("  " + line)
    if args.output:
        try:
            compiled.save(args.output)
        except OSError as exc:
            raise CliError(f"-o {args.output}: cannot write the plan ({exc.strerror or exc})") from None
        print(f"plan written to {args.output} ({_fmt_bytes(Path(args.output).stat().st_size)})")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import onyxia
    from onyxia.ir.shapes import shape_str
    from onyxia.loading import is_plan_file

    if is_plan_file(args.model):  # a compiled plan: what it holds and which kernels run at --dim
        from onyxia.plan import CompiledModel
        from onyxia.plan.show import literal_lines, select_lines

        compiled = CompiledModel.load(args.model)
        dims = _parse_dims(args.dim)
        unknown = sorted(set(dims) - set(compiled.dims))
        if unknown:
            raise CliError(f"--dim {unknown[0]}: the plan's symbols are {', '.join(sorted(compiled.dims)) or 'none'}")
        print(f"plan {args.model}")
        for line in (*_summary(compiled), *literal_lines(compiled), *select_lines(compiled, dims)):
            print("  " + line)
        return 0
    from onyxia.operators.registry import resolve_operator

    graph = onyxia.load_model(args.model)
    registry = onyxia.core_operator_registry()
    print(f"model {args.model}: graph '{graph.name}', opsets "
          + ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in sorted(graph.opsets.items())))
    print("inputs:")
    for n in graph.inputs:
        t = graph.tensor(n)
        print(f"  {n}: {t.dtype} {shape_str(t.shape)}")
    weights = [t for t in graph.tensors.values() if t.value is not None]
    print(f"weights: {len(weights)} tensors, {_fmt_bytes(sum(t.value.nbytes for t in weights))}")
    print("outputs:")
    outputs = _inferred_outputs(graph)
    for n in graph.outputs:
        print(f"  {n}: {outputs.get(n, '(shape needs a supported model)')}")
    histogram = collections.Counter((n.domain, n.op_type) for n in graph.nodes)
    print(f"operators ({len(graph)} nodes):")
    for (domain, op), count in sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {count:6d}  {domain + '::' if domain else ''}{op}")
    missing: dict[tuple[str, str], list[str]] = {}
    for node in graph.nodes:
        if resolve_operator(graph, registry, node) is None:
            missing.setdefault((node.domain, node.op_type), []).append(node.name)
    if missing:
        print("unsupported operators:")
        for (domain, op), nodes in sorted(missing.items()):
            print(f"  {domain + '::' if domain else ''}{op}: {', '.join(nodes)}")
        return EXIT_USER_ERROR
    print("all operators are supported")
    _print_literal_symbols(graph, _parse_dims(args.dim))
    return 0


def _print_literal_symbols(graph, dims: dict[str, int]) -> None:
    """The symbols a plan for `dims` takes as literals (a new value compiles another plan)."""
    import onyxia
    from onyxia.compiler.passes.resolution import input_symbols
    from onyxia.plan.show import literal_lines

    symbols = sorted(input_symbols(graph))
    if not symbols:
        return
    missing = [s for s in symbols if s not in dims]
    if missing:
        print(f"literal-bound symbols: pass --dim for {', '.join(missing)} to list them")
        return
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(graph, dims)
    for line in literal_lines(compiled):
        print(line)


def _inferred_outputs(graph) -> dict[str, str]:
    from onyxia.session import InferenceSession

    try:
        return {a.name: f"{a.type[7:-1]} [{', '.join(map(str, a.shape))}]"
                for a in InferenceSession(graph).get_outputs()}
    except OnyxiaError:
        return {}


def _load_for_run(path: str, dims: dict[str, int], static: Sequence[str]):
    from onyxia.loading import is_plan_file
    from onyxia.plan import CompiledModel

    if path.endswith(".onyxia") or is_plan_file(path):
        compiled = CompiledModel.load(path)
        return None, compiled
    return _compile(path, dims, static)


def _executor(args: argparse.Namespace):
    """(is a plan file?, compiled model, runtime, executor, load report) for `run` and `bench`:
    via the plan cache unless --no-cache; a progress line on a terminal past a second."""
    from onyxia.loading import DelayedProgress, LoadReport, load_executor
    from onyxia.runtime import Runtime

    if Path(args.model).is_dir():  # an LLM folder: compiled by onyxia.llm (no plan cache)
        _, compiled = _compile(args.model, _parse_dims(args.dim), args.static or ())
        runtime = Runtime(adapter=args.adapter)
        exe = runtime.load_model(compiled)
        return False, compiled, runtime, exe, LoadReport(runtime=exe.stats.load)
    compiled, runtime, exe, report = load_executor(args.model, _parse_dims(args.dim), args.static or (),
                                                   adapter=args.adapter, plan_cache=not args.no_cache,
                                                   progress=DelayedProgress("loading"))
    return report.cache == "plan", compiled, runtime, exe, report


def cmd_run(args: argparse.Namespace) -> int:
    is_plan, compiled, runtime, exe, report = _executor(args)
    feeds = feeds_for(exe, compiled, args.input, args.seed, index_bounds(args.model))
    start = time.perf_counter()
    outputs = exe.run(feeds)
    elapsed = time.perf_counter() - start
    print(report.line())
    print(f"ran {args.model} on {runtime.info.summary} in {elapsed * 1e3:.2f} ms "
          f"({exe.dispatches_per_run} dispatches)")
    for name, value in outputs.items():
        stats = ""
        if value.size and np.issubdtype(value.dtype, np.number):
            v = value.astype(np.float64)
            stats = f" mean={v.mean():.4g} std={v.std():.4g} min={v.min():.4g} max={v.max():.4g}"
        print(f"  {name}: {value.dtype} {list(value.shape)}{stats}")
    if args.check:
        return _check(args.model, is_plan, feeds, outputs)
    return 0


def _check(model_path: str, is_plan: bool, feeds, outputs) -> int:
    if is_plan:
        raise OnyxiaError("--check needs the ONNX model, not a plan file")
    try:
        import onnxruntime as ort
    except ImportError:
        print("check: onnxruntime is not installed; skipped")
        return 0
    try:
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        reference = dict(zip(names, sess.run(names, feeds)))
    except Exception as exc:  # onnxruntime raises its own exception types for any refusal
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(f"--check: onnxruntime cannot run {model_path} with these inputs: {message}") from None
    worst = 0.0
    for name, ours in outputs.items():
        ref = reference[name]
        if ours.shape != ref.shape:
            print(f"check: {name}: shape {list(ours.shape)} vs onnxruntime {list(ref.shape)}: MISMATCH")
            return EXIT_USER_ERROR
        a, b = ours.astype(np.float64), ref.astype(np.float64)
        abs_err = float(np.max(np.abs(a - b))) if a.size else 0.0
        rel_err = float(np.max(np.abs(a - b) / (np.abs(b) + 1e-12))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        worst = max(worst, abs_err / max(scale, 1e-6))
        print(f"check: {name}: max abs error {abs_err:.3g}, max rel error {rel_err:.3g} vs onnxruntime")
    ok = worst < 1e-3
    print("check: OK" if ok else "check: outputs differ from onnxruntime")
    return 0 if ok else EXIT_USER_ERROR


def cmd_bench(args: argparse.Namespace) -> int:
    if args.iterations < 1 or args.warmup < 0:
        raise CliError(f"--iterations must be at least 1 and --warmup at least 0, got "
                       f"{args.iterations} and {args.warmup}")
    if args.profile_repeats < 1:
        raise CliError(f"--profile-repeats must be at least 1, got {args.profile_repeats}")
    is_plan, compiled, runtime, exe, report = _executor(args)
    feeds = feeds_for(exe, compiled, None, 0, index_bounds(args.model))
    start = time.perf_counter()
    exe.run(feeds)
    report.first_run_s = time.perf_counter() - start
    print(f"load of {args.model}:")
    for line in report.lines():
        print("  " + line)
    # The kernel choices the first run made untimed, timed now (runtime/tuner.py): the runs
    # measured below replay the tuned choices, not runs still spending slices on timing.
    start = time.perf_counter()
    tuned = exe.tune()
    if tuned:
        spent = time.perf_counter() - start
        print(f"  tuned {len(tuned)} kernel choices after the first run in {spent * 1e3:.0f} ms")
    # Kernel choices a quick first run stood a faster-compiling variant in for (runtime/ahead.py):
    # replayed from here, once the helper threads have compiled them.
    switched = exe.finish_quick()
    if switched:
        print(f"  {switched} kernel choices switched from their quick first-run variants")
    for _ in range(args.warmup):
        exe.run(feeds)
    times = []
    for i in range(args.iterations):
        start = time.perf_counter()
        exe.run(feeds)
        times.append(time.perf_counter() - start)
        _progress("benchmarking", i + 1, args.iterations)
    median = statistics.median(times)
    dispatches = exe.dispatches_per_run
    print(f"{args.model} on {runtime.info.summary}: median {median * 1e3:.3f} ms over {args.iterations} runs "
          f"({dispatches} dispatches, {median / max(dispatches, 1) * 1e6:.1f} µs/dispatch)")
    if not is_plan and not args.no_ort:
        try:
            import onnxruntime as ort
        except ImportError:
            return 0
        sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        ort_times = []
        for _ in range(args.iterations):
            start = time.perf_counter()
            sess.run(None, feeds)
            ort_times.append(time.perf_counter() - start)
        ort_median = statistics.median(ort_times)
        print(f"onnxruntime CPU: median {ort_median * 1e3:.3f} ms; onyxia/onnxruntime time ratio "
              f"{median / ort_median:.2f}")
    if args.trace and not args.profile:
        raise CliError("--trace needs --profile")
    if args.profile:
        from onyxia.runtime.peaks import adapter_peaks
        from onyxia.runtime.profile import profile, profile_lines, write_trace

        profiles = profile(exe, feeds, repeats=args.profile_repeats)
        peaks = adapter_peaks(runtime)
        for line in profile_lines(profiles, peaks):
            print("  " + line)
        if args.trace:
            write_trace(args.trace, profiles, peaks, runtime.info.summary)
            print(f"trace of {len(profiles)} dispatches written to {args.trace} (open it in ui.perfetto.dev)")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """Time every kernel choice (tuned Select step) for these dims and write the tuning cache."""
    from dataclasses import replace

    from onyxia.runtime import Runtime
    from onyxia.runtime.tuner import TuneSettings

    if args.budget <= 0:
        raise CliError(f"--budget must be positive, got {args.budget}")
    dims = _parse_dims(args.dim)
    graph, compiled = _load_for_run(args.model, dims, args.static or ())
    runtime = Runtime(adapter=args.adapter)
    # Timing happens below, for every step: the load only finds cached choices.
    exe = runtime.load_model(compiled, tuning=replace(TuneSettings.from_env(), enabled=False))
    if graph is None and dims:
        exe.update_dimensions(dims)
    exe.tuner.settings = replace(exe.tuner.settings, enabled=True)
    results = exe.tune(force=True, budget_s=args.budget)
    cache = exe.tuner.cache.path if exe.tuner.cache is not None else "none"
    print(f"tuned {len(results)} kernel choices of {args.model} on {runtime.info.summary} "
          f"({exe.stats.tuning_timings} alternatives timed; cache {cache})")
    for r in results:
        times = ", ".join(f"{label} {t * 1e6:.1f} µs" for label, t in sorted(r.times.items(), key=lambda kv: kv[1]))
        print(f"  {r.key} [{r.shape_class}]: {r.choice}  ({times})")
    missed = sum(1 for c in exe.commands if getattr(c, "source", None) == "default")
    if missed:
        print(f"  {missed} steps keep the heuristic's choice (over --budget, or not timeable)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onyxia", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def model_args(p: argparse.ArgumentParser, plan_ok: bool = True) -> None:
        p.add_argument("model", help="ONNX model" + (" or compiled plan (.onyxia)" if plan_ok else ""))
        p.add_argument("--dim", action="append", metavar="NAME=VALUE", help="value of a symbolic dimension")
        p.add_argument("--static", action="append", metavar="NAME",
                       help="bake this dimension into the shaders (changing it later recompiles them)")

    p = sub.add_parser("compile", help="compile a model (or an LLM folder) and print a plan summary with its "
                       "bytes moved, peak activations and, for a decoder, a decode step's traffic")
    model_args(p, plan_ok=False)
    p.add_argument("-o", "--output", metavar="PLAN", help="write the compiled plan to this file")
    p.add_argument("--decoder", metavar="FILE|DTYPE", help="an LLM folder's ONNX file when it has several "
                   "(onnx/model_q4.onnx, or a transformers.js dtype name: fp16, q8, q4, q4f16, bnb4, ...)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a model or plan on the GPU")
    model_args(p)
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="input values (default: random)")
    p.add_argument("--check", action="store_true", help="compare with onnxruntime (max abs/rel error)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--adapter", help="adapter index or name substring (default: best; or ONYXIA_ADAPTER)")
    p.add_argument("--no-cache", action="store_true", help="compile anew, without the plan cache (or "
                   "ONYXIA_PLAN_CACHE=0)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("inspect", help="list inputs, outputs, operators and unsupported ops; of a compiled "
                       "plan (.onyxia), its summary and kernel choices (Select steps)")
    p.add_argument("model", help="ONNX model or compiled plan (.onyxia)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="with a plan: the dims at which to say which alternative runs; with a model: the "
                   "dims to compile for, to list the symbols the plan takes as literals")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("bench", help="time runs of a model (median), against onnxruntime CPU")
    model_args(p)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-ort", action="store_true", help="skip the onnxruntime comparison")
    p.add_argument("--profile", action="store_true",
                   help="per-dispatch GPU time (timestamp queries), bytes, flops and roofline fraction")
    p.add_argument("--profile-repeats", type=int, default=5, metavar="N",
                   help="with --profile: each dispatch's median over N timed passes (default 5)")
    p.add_argument("--trace", metavar="FILE.json", help="with --profile: write a Chrome/Perfetto trace")
    p.add_argument("--adapter", help="adapter index or name substring")
    p.add_argument("--no-cache", action="store_true", help="compile anew, without the plan cache")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("tune", help="time the kernel variants for these dims and cache the fastest")
    model_args(p)
    p.add_argument("--budget", type=float, default=120.0, help="seconds of timing at most (default 120)")
    p.add_argument("--adapter", help="adapter index or name substring")
    p.set_defaults(func=cmd_tune)

    from onyxia.web.cli import add_web_parser

    add_web_parser(sub, model_args, lambda args: _load_for_run(args.model, _parse_dims(args.dim), args.static or ()))

    try:
        from onyxia.llm.cli import add_generate_parser
    except ImportError:
        pass
    else:
        add_generate_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except OnyxiaError as exc:
        if args.debug:
            raise
        print(f"onyxia: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("onyxia: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file the user named cannot be read or written
        if args.debug:
            raise
        print(f"onyxia: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as exc:  # a bug: still one line; --debug shows where
        if args.debug:
            raise
        print(f"onyxia: error: internal error ({type(exc).__name__}: {exc}); this is a bug in "
              "onyxia, --debug shows the traceback", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
