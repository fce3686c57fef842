"""Compile ahead (runtime/precompile.py): helper devices compile the next run's kernels from the
last backwards on an adapter that compiles at dispatch (lavapipe), the run's own dispatches
take them off the list, a kernel a helper cannot build is left to the run, the process exits
with a helper mid-compile, and a plan from the cache (its kernels compiled by an earlier
process) starts no helper. Counted, not timed: the speed-up is benchmarks/bench_models.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onyxia
from onyxia.runtime.precompile import Kernel, Precompiler, for_device
from tests.helpers import run_ort

ROOT = Path(__file__).resolve().parents[2]


def kernel(salt: float, *, body: str = "") -> Kernel:
    """A kernel no earlier process compiled (the salt is a fresh constant in its code)."""
    code = textwrap.dedent(f"""
        struct Params {{ n: u32 }}
        var<immediate> params: Params;
        @group(0) @binding(0) var<storage, read> a_buf: array<f32>;
        @group(0) @binding(1) var<storage, read_write> out_buf: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
            let i = gid.x;
            if (i >= params.n) {{ return; }}
            var x = a_buf[i] * {salt!r};
            {body}
            out_buf[i] = x;
        }}""")
    return Kernel(code, "main", (True, False), 4)


def fresh(n: int, **kw) -> list[Kernel]:
    base = uuid.uuid4().int % 100_000
    return [kernel(base + k + 0.5, **kw) for k in range(n)]


def helpers(runtime, count: int = 1) -> Precompiler:
    assert runtime.info.adapter_type == "CPU", "lavapipe (CI's adapter) compiles at dispatch"
    return Precompiler(runtime.adapter, runtime.device.features, dict(runtime.adapter.limits), count)


def test_helpers_compile_the_last_kernels_first(runtime):
    pc = helpers(runtime)
    kernels = fresh(5)
    try:
        pc.want(kernels)
        assert pc.idle(120)
        assert pc.order == [k.key for k in kernels[::-1]]
        assert pc.compiled == {k.key for k in kernels} and not pc.failed
    finally:
        pc.close()


def test_kernels_the_run_compiled_leave_the_list(runtime):
    pc = helpers(runtime)
    kernels = fresh(6)
    try:
        pc.done(kernels[3:])  # dispatched by a run already
        pc.want(kernels)
        assert pc.idle(120)
        assert pc.order == [k.key for k in kernels[2::-1]]
        more = fresh(6)
        pc.want(more)
        pc.done(more)  # the run got there first: at most the kernel in hand is compiled
        assert pc.idle(120)
        assert len(set(pc.order) & {k.key for k in more}) <= 1
    finally:
        pc.close()


def test_fewer_than_three_cold_kernels_are_left_to_the_run(runtime):
    pc = helpers(runtime)
    try:
        pc.want(fresh(2))
        assert pc.idle(10) and pc.order == [] and not pc._threads
    finally:
        pc.close()


def test_background_kernels_wait_a_moment_and_yield_to_a_runs_list(runtime):
    pc = helpers(runtime)
    later, run = fresh(1), fresh(3)
    try:
        pc.want(later, background=True)  # however few: nothing else compiles them
        pc.want(run)  # a run's cold kernels, handed over while the background ones wait
        assert pc.idle(120)
        assert pc.order == [k.key for k in run[::-1]] + [later[0].key]
        assert pc.settled([*run, *later]) and not pc.settled(fresh(1))
        pc.done(more := fresh(1))  # a run dispatched it: settled too
        assert pc.settled(more)
        slow = fresh(2)
        pc.want(slow, background=True)
        assert not pc.settled(slow)  # not at once: a process ending now need not wait for a helper
        assert pc.idle(120) and pc.settled(slow)
    finally:
        pc.close()


def test_a_kernel_a_helper_cannot_build_is_left_to_the_run(runtime):
    pc = helpers(runtime)
    good = fresh(3)
    bad = Kernel("this is not WGSL", "main", (True, False), 4)
    try:
        pc.want([*good[:2], bad, good[2]])
        assert pc.idle(120)
        assert pc.failed == {bad.key} and pc.compiled == {k.key for k in good}
    finally:
        pc.close()


def chain(n: int) -> onnx.ModelProto:
    """n elementwise ops of different kinds with a MatMul between each: distinct kernels."""
    ops = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp"]
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(n):
        w = f"w{k}"
        inits.append(helper.make_tensor(w, TensorProto.FLOAT, [16, 16], (0.3 * rng.standard_normal(256)).tolist()))
        nodes += [helper.make_node("MatMul", [x, w], [f"m{k}"]),
                  helper.make_node(ops[k % len(ops)], [f"m{k}"], [f"y{k}"])]
        x = f"y{k}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_session_hands_its_first_run_to_the_helpers_and_still_matches_onnxruntime(runtime, tmp_path):
    model = chain(6)
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    feeds = {"x": np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)}
    # The helpers are the process's (one per adapter): a kernel an earlier test's run dispatched
    # (the row classes share theirs across sizes) is known to them already and not handed again.
    known = set(for_device(runtime.adapter, runtime.device, True)._known)
    sess = onyxia.InferenceSession(str(path), runtime=runtime, plan_cache=tmp_path / "plans")
    exe = sess._executor_for(feeds)
    pc = exe.backend._precompiler
    assert pc is not None and exe.limits.compiles_at_dispatch
    programs = {id(exe.programs[d.shader]) for d in exe.dispatch_commands() if all(d.workgroups)}
    handed = {exe.backend._kernel_of[p] for p in programs}
    assert len(handed) >= 3
    assert pc.idle(120)  # every kernel compiled ahead before the run
    assert {k.key for k in handed} <= pc._known
    assert all(k.key in pc.compiled for k in handed if k.key not in known)  # the new ones by the helpers
    (out,) = sess.run(None, feeds)
    np.testing.assert_allclose(out, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)
    assert exe.stats.precompiled == sum(k.key in pc.compiled for k in handed)

    # The next process's session finds the plan in the cache: its kernels are in the driver's.
    again = onyxia.InferenceSession(str(path), runtime=runtime, plan_cache=tmp_path / "plans")
    assert not again._executor_for(feeds).backend._ahead_of_runs  # helpers only for background work
    assert again.load_report.cache == "hit"


@pytest.mark.parametrize("setting", ["0", "off"])
def test_switched_off_by_the_environment_or_a_disabled_mesa_cache(runtime, monkeypatch, setting):
    monkeypatch.setenv("ONYXIA_PRECOMPILE", setting)
    assert for_device(runtime.adapter, runtime.device, True) is None
    monkeypatch.delenv("ONYXIA_PRECOMPILE")
    monkeypatch.setenv("MESA_SHADER_CACHE_DISABLE", "true")
    assert for_device(runtime.adapter, runtime.device, True) is None
    monkeypatch.delenv("MESA_SHADER_CACHE_DISABLE")
    assert for_device(runtime.adapter, runtime.device, False) is None  # compiles when built
    assert for_device(runtime.adapter, runtime.device, True) is not None


def test_runtimes_of_one_adapter_share_the_helpers(runtime):
    """Each Runtime (each session without one) enumerates its own adapter object: one set of
    helper devices serves them all, not one per session."""
    from onyxia.runtime import Runtime

    other = Runtime()
    assert other.adapter is not runtime.adapter
    assert for_device(other.adapter, other.device, True) is for_device(runtime.adapter, runtime.device, True)


def test_the_process_exits_with_a_helper_mid_compile(tmp_path):
    """Interpreter exit stops the helpers after the kernel in hand: no hang, no crash."""
    heavy = "\n".join(f"x = sin(x) * {k}.5 + cos(x * {k}.25);" for k in range(300))  # ~0.2 s a kernel
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from onyxia.runtime import Runtime
        from tests.gpu.test_precompile import fresh, helpers
        pc = helpers(Runtime(), 2)
        import atexit
        atexit.register(pc.close)
        pc.want(fresh(200, body={heavy!r}))
        while not pc.order:
            time.sleep(0.01)
        assert pc._busy, "a helper is compiling"
        print("exiting after", len(pc.order), flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting" in done.stdout


def test_mesa_cache_rules(tmp_path):
    from onyxia.runtime.precompile import mesa_disk_cache_enabled

    assert mesa_disk_cache_enabled({"MESA_SHADER_CACHE_DIR": str(tmp_path / "new" / "dir")})
    assert mesa_disk_cache_enabled({"MESA_SHADER_CACHE_DISABLE": "false", "MESA_SHADER_CACHE_DIR": str(tmp_path)})
    assert not mesa_disk_cache_enabled({"MESA_SHADER_CACHE_DISABLE": "1", "MESA_SHADER_CACHE_DIR": str(tmp_path)})
    assert not mesa_disk_cache_enabled({"MESA_GLSL_CACHE_DISABLE": "true", "MESA_SHADER_CACHE_DIR": str(tmp_path)})
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere
        assert not mesa_disk_cache_enabled({"MESA_SHADER_CACHE_DIR": str(locked / "cache")})
