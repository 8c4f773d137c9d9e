"""Interop with apache-tvm-ffi: a consumer of the exchange table that nobody on this project wrote.

How tvm-ffi (0.1.x, read from its installed Cython sources) finds the table of a torch tensor:

* ``tvm_ffi.from_dlpack(t)`` reads ``t.__dlpack_c_exchange_api__`` (capsule or int) on EVERY call, calls
  ``managed_tensor_from_py_object_no_sync`` and, if that raises BufferError, silently falls back to
  ``t.__dlpack__()`` (cython/tensor.pxi, ``_from_dlpack_universal``).
* A torch tensor passed to a tvm-ffi function goes through an argument setter chosen ONCE PER TYPE, at the
  first call that sees the type, for the whole process (cython/function.pxi, ``TVMFFIPyArgSetterFactory_``):
  it stores the table found on ``type(arg).__dlpack_c_exchange_api__`` then. Each call then runs
  ``managed_tensor_from_py_object_no_sync`` per tensor, makes that table the call's context table, installs
  its ``managed_tensor_allocator`` as the environment allocator for the duration of the call
  (``TVMFFIEnvSetDLPackManagedTensorAllocator``, tvm_ffi_python_helpers.h ``FuncCall``) and turns tensors the
  function returns back into torch tensors with the SAME table's ``managed_tensor_to_py_object_no_sync``.
* At import, ``tvm_ffi._optional_torch_c_dlpack`` leaves a published capsule alone, turns a legacy int
  (``__c_dlpack_exchange_api__``) into a capsule, and only when neither exists compiles its own backport;
  ``TVM_FFI_DISABLE_TORCH_C_DLPACK=1`` skips that module entirely.

Because of the per-type cache, every scenario runs in a fresh interpreter that publishes first and imports
tvm_ffi second. This file is that child program too (``python test_tvm_ffi_interop.py SCENARIO BUILD_DIR``
runs the scenario's checks and prints one JSON object); the parent runs each scenario once and turns each
check into its own test, ``test_interop[scenario-check]``. The pytest process itself never imports tvm_ffi.

How the tests prove WHICH table tvm-ffi used (see the check docstrings):

1. Pointer identity, the decisive proof for function calls: a Python callback converted to a tvm-ffi function
   asks libtvm_ffi for the environment allocator while tvm-ffi is calling it with a torch tensor; that
   pointer is ``ctx_table->managed_tensor_allocator``, read by tvm-ffi from the very table it picked, and it
   equals the allocator slot of the expected table (ours vs torch's, which differ).
2. Behaviour only this project's table has: it refuses conj/neg-bit tensors with a BufferError whose text
   ("torch_dlpack_bridge: ...") tvm-ffi passes through on a function call, and it gives the consumer its
   own copy of shape/strides (torch's table points them into the live TensorImpl, so an in-place ``t_()`` on
   the source rewrites the shape a consumer holds). These show ``from_dlpack`` (which has no allocator) uses
   our table too.

Under the default policy (torch's native table, torch >= 2.10) the aliasing/round-trip checks pass as well.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import json
import os
import subprocess
import sys
import traceback

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A tvm-ffi kernel module compiled once (tvm_ffi.cpp.load_inline, ~5 s, cached in .pytest_cache).
KERNEL_SOURCE = os.path.join(REPO, "tests", "tvm_ffi_interop_kernels.cc")
KERNEL_FUNCTIONS = ["fill", "alloc_filled"]


# =========================================================================================================
# Child side: runs in a fresh interpreter (python this_file.py SCENARIO BUILD_DIR).
# =========================================================================================================

class Ctx:
    """What the checks of one child process share."""

    def __init__(self, scenario: str, build_dir: str) -> None:
        import torch

        import torch_dlpack_bridge

        self.scenario = scenario
        self.build_dir = build_dir
        self.torch = torch
        self.bridge = torch_dlpack_bridge
        self.ours = torch_dlpack_bridge.exchange_api_address()
        native = torch_dlpack_bridge._native_capsule()
        self.native = torch_dlpack_bridge._table._address_of(native) if native is not None else None
        # provider expected to be published when tvm_ffi is imported: torch's own table in the scenarios
        # about it (never scheduled where torch has none, see NEEDS_NATIVE), ours in the others
        if scenario in NEEDS_NATIVE:
            assert self.native is not None, NEEDS_NATIVE[scenario]
        self.expected = "torch" if scenario in NEEDS_NATIVE else "torch_dlpack_bridge"
        self.expected_address = self.ours if self.expected == "torch_dlpack_bridge" else self.native
        self._kernels = None

    def publish_then_import(self) -> None:
        """Publish the table for this scenario, then (and only then) import tvm_ffi."""
        assert "tvm_ffi" not in sys.modules
        torch, bridge = self.torch, self.bridge
        if self.scenario in ("bridge", "legacy_int"):
            bridge.install(prefer="bridge")
        else:
            bridge.install(prefer="torch")
        if self.scenario == "legacy_int":  # only the DLPack 1.2 int name is left on the type
            delattr(torch.Tensor, bridge.CAPSULE_ATTR)
            assert not hasattr(torch.Tensor, bridge.CAPSULE_ATTR)
        self.provider_before_import = bridge.active_provider()
        import tvm_ffi

        self.tvm_ffi = tvm_ffi
        self.get_allocator = tvm_ffi.LIB.TVMFFIEnvGetDLPackManagedTensorAllocator
        self.get_allocator.restype = ctypes.c_void_p
        self.get_allocator.argtypes = []
        self.echo = tvm_ffi.get_global_func("testing.echo")

    @staticmethod
    def slot(table_address: int, index: int) -> int:
        """Function pointer `index` of a DLPackExchangeAPI (0 allocator, 1 from_py, 2 to_py, 3 dltensor, 4 stream)."""
        return ctypes.c_void_p.from_address(table_address + 16 + 8 * index).value

    def allocator_seen_by(self, *args) -> int:
        """The environment allocator while tvm-ffi calls a function (a Python callback) with `args`."""
        seen = []
        self.tvm_ffi.convert(lambda *a: seen.append(self.get_allocator()))(*args)
        return seen[0]

    def kernels(self):
        if self._kernels is None:
            import tvm_ffi.cpp

            self._kernels = tvm_ffi.cpp.load_inline("tdb_tvm_ffi_interop", cpp_sources=open(KERNEL_SOURCE).read(),
                                                    functions=KERNEL_FUNCTIONS, build_directory=self.build_dir)
        return self._kernels

    def use_counts(self, t) -> tuple:
        """(references to t's TensorImpl, references to its StorageImpl): an export holds one or the other
        (torch's table keeps the TensorImpl, ours the storage)."""
        return t._use_count(), self.torch._C._storage_Use_Count(t.untyped_storage()._cdata)

    def assert_held_then_released(self, t, take) -> None:
        """take(t) returns something that holds a reference to t's memory; dropping it releases that reference."""
        before = self.use_counts(t)
        held = take(t)
        assert self.use_counts(t) != before
        del held
        gc.collect()
        assert self.use_counts(t) == before


def check_published_table(c: Ctx) -> None:
    """The table tvm-ffi finds on torch.Tensor is the one this scenario published, and tvm-ffi's import
    neither replaced it nor built its backport (TVM_FFI_DISABLE_TORCH_C_DLPACK=1 in the bridge/torch scenarios;
    in legacy_int, tvm-ffi's loader turned our legacy int into a capsule holding OUR address)."""
    bridge, torch = c.bridge, c.torch
    if c.scenario == "legacy_int":
        assert c.provider_before_import == {bridge.CAPSULE_ATTR: None, bridge.INT_ATTR: "torch_dlpack_bridge"}
    else:
        assert c.provider_before_import == {bridge.CAPSULE_ATTR: c.expected, bridge.INT_ATTR: c.expected}
    assert bridge.active_provider() == {bridge.CAPSULE_ATTR: c.expected, bridge.INT_ATTR: c.expected}
    assert bridge._table._address_of(torch.Tensor.__dlpack_c_exchange_api__) == c.expected_address
    assert getattr(c.tvm_ffi._optional_torch_c_dlpack, "_LIB", None) is None  # no backport library loaded


def check_call_uses_published_table(c: Ctx) -> None:
    """Pointer-identity proof: while tvm-ffi runs a function called with a torch tensor, the environment
    allocator is the expected table's managed_tensor_allocator slot (tvm-ffi copies it from the table it
    chose for the call; the same table then imports the results). Ours and torch's slots differ, so this
    tells the tables apart. Also for nn.Parameter and a subclass (separate cache entries, same table), and
    the allocator is restored (none) once the call returns."""
    torch = c.torch
    assert c.native is None or c.slot(c.ours, 0) != c.slot(c.native, 0)
    t = torch.arange(4.0)
    assert c.get_allocator() is None
    assert c.allocator_seen_by(t) == c.slot(c.expected_address, 0)
    assert c.get_allocator() is None

    class Sub(torch.Tensor):
        pass

    assert c.allocator_seen_by(torch.nn.Parameter(torch.zeros(2))) == c.slot(c.expected_address, 0)
    assert c.allocator_seen_by(t.as_subclass(Sub)) == c.slot(c.expected_address, 0)
    # a call with no tensor sets no allocator
    assert c.allocator_seen_by(1) is None


def check_refusal_fingerprint(c: Ctx) -> None:
    """Behavioural proof that the arguments and from_dlpack go through OUR table: it refuses tensors whose
    memory does not hold the values (conj bit, neg bit) with BufferError. On a function call tvm-ffi
    propagates our exact message; from_dlpack swallows our BufferError and falls back to torch's
    __dlpack__, which refuses a conj tensor too (but NOT a neg-bit one: see the note below). Torch's native
    table exports such a tensor silently with the raw (unconjugated) values: the consumer reads the wrong
    numbers, and no message of ours appears. No reference to the refused tensor leaks."""
    torch, tvm_ffi = c.torch, c.tvm_ffi
    base = torch.tensor([1 + 2j, 3 - 4j])
    conj = base.conj()
    neg = torch.tensor([1 + 1j, 2 + 2j]).conj().imag
    assert conj.is_conj() and neg.is_neg()
    if c.expected == "torch_dlpack_bridge":
        before = c.use_counts(base)
        for bad, what in ((conj, "conjugate bit"), (neg, "negative bit")):
            try:
                c.echo(bad)
            except BufferError as e:
                assert str(e).startswith("torch_dlpack_bridge: ") and what in str(e), str(e)
            else:
                raise AssertionError(f"echo accepted a tensor with the {what} set")
        # tvm-ffi falls back to torch's __dlpack__, which refuses with its own class (BufferError in recent
        # torch, RuntimeError in torch 2.4): expect exactly what torch raises for it
        try:
            conj.__dlpack__()
        except Exception as e:  # noqa: BLE001 - recording torch's refusal
            torch_refusal = type(e)
        else:
            raise AssertionError("torch's __dlpack__ exported a tensor with the conjugate bit set")
        try:
            tvm_ffi.from_dlpack(conj)
        except torch_refusal as e:  # torch's __dlpack__ fallback, after our table refused
            assert not str(e).startswith("torch_dlpack_bridge"), str(e)
        else:
            raise AssertionError("from_dlpack accepted a tensor with the conjugate bit set")
        # NOTE: from_dlpack(neg) "succeeds": our table refuses, tvm-ffi falls back to torch's __dlpack__,
        # which checks the conj bit but not the neg bit, and the consumer reads [1, 2] instead of [-1, -2].
        gc.collect()
        assert c.use_counts(base) == before
        # resolved copies go through
        assert torch.equal(c.echo(conj.resolve_conj()), conj)
    else:  # torch 2.13's table exports it (echo returns the raw, unconjugated values); at least no text of ours
        try:
            c.echo(conj)
        except Exception as e:
            assert "torch_dlpack_bridge" not in str(e), str(e)


def check_shape_snapshot_fingerprint(c: Ctx) -> None:
    """Behavioural proof for from_dlpack: our export hands the consumer its own shape/strides, so an in-place
    metadata change of the source (here t.t_()) does not rewrite the shape tvm-ffi holds; with
    torch's table the tvm_ffi.Tensor's shape follows the live TensorImpl."""
    torch, tvm_ffi = c.torch, c.tvm_ffi
    t = torch.zeros(2, 3)
    x = tvm_ffi.from_dlpack(t)
    t.t_()
    if c.expected == "torch_dlpack_bridge":
        assert (x.shape, x.strides) == ((2, 3), (3, 1))
    else:  # torch 2.13's table: ((3, 2), (1, 3)), the source's new metadata; not pinned here
        assert (x.shape, x.strides) in (((2, 3), (3, 1)), ((3, 2), (1, 3)))


def check_from_dlpack_aliases(c: Ctx) -> None:
    """tvm_ffi.from_dlpack(t) is zero-copy: same address (including a storage offset), shape, strides, dtype,
    device; writes through torch are visible through tvm-ffi (read via numpy.from_dlpack) and writes through
    that numpy view are visible in torch. The tvm_ffi.Tensor keeps the memory alive after the torch tensor
    is gone, and the storage reference it held is released when it dies."""
    import numpy as np

    torch, tvm_ffi = c.torch, c.tvm_ffi
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    for t in (base, base[1:], base[1:, ::2], base.t(), base[2, 3]):
        x = tvm_ffi.from_dlpack(t)
        assert x.data_ptr() == t.data_ptr()
        assert x.shape == tuple(t.shape) and x.strides == t.stride()
        assert str(x.dtype) == "float32" and x.device.type == "cpu" and x.device.index == 0
        assert x.is_contiguous() == t.is_contiguous()
    t = torch.zeros(5, dtype=torch.float64)
    x = tvm_ffi.from_dlpack(t)
    view = np.from_dlpack(x)
    assert view.ctypes.data == t.data_ptr()
    t[1] = 3.5
    assert view[1] == 3.5
    if view.flags.writeable:
        view[4] = -2.0
    else:  # numpy 1.x (the numpy of torch 2.4) marks DLPack imports read-only: write at the view's address
        ctypes.c_double.from_address(view.ctypes.data + 4 * view.itemsize).value = -2.0
    assert t[4].item() == -2.0
    # lifetime: the consumer's reference keeps the memory; dropping it releases the reference
    c.assert_held_then_released(torch.arange(1000, dtype=torch.int64), tvm_ffi.from_dlpack)
    x = tvm_ffi.from_dlpack(torch.arange(1000, dtype=torch.int64))
    gc.collect()
    torch.ones(1000, dtype=torch.int64)  # reuse freed memory if it had been freed
    assert np.array_equal(np.from_dlpack(x), np.arange(1000))


def check_echo_returns_torch_tensor(c: Ctx) -> None:
    """A tensor returned by a tvm-ffi function whose argument was a torch tensor comes back as a torch.Tensor
    (through the table's managed_tensor_to_py_object_no_sync) aliasing the argument: same address, shape,
    strides, dtype; a new Python object; writes visible both ways; for every dtype both sides know
    (bool, ints, uints, float16/32/64, bfloat16, float8 variants, float4_e2m1fn_x2), size-zero and 0-d
    tensors, offset and strided views. References return to baseline once the result is dropped."""
    torch = c.torch
    t = torch.zeros(2, 3)
    r = c.echo(t)
    assert type(r) is torch.Tensor and r is not t
    assert r.data_ptr() == t.data_ptr() and r.shape == t.shape and r.stride() == t.stride()
    t[0, 1] = 4.0
    assert r[0, 1].item() == 4.0
    r[1, 2] = 9.0
    assert t[1, 2].item() == 9.0
    base = torch.arange(24.0).reshape(4, 6)
    for v in (base[1:], base[1:, ::2], base.t(), base[2, 3], torch.ones(0), torch.ones(3, 0)):
        r = c.echo(v)
        assert type(r) is torch.Tensor
        assert (r.data_ptr(), r.shape, r.stride(), r.dtype) == (v.data_ptr(), v.shape, v.stride(), v.dtype)
        assert torch.equal(r, v)
    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
              torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
              torch.complex64, torch.complex128]
    dtypes += [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                           "float8_e8m0fnu", "float4_e2m1fn_x2") if hasattr(torch, n)]
    for dt in dtypes:
        v = torch.zeros(2, 3, dtype=torch.uint8).view(dt) if dt.itemsize == 1 else torch.zeros(2, 3, dtype=dt)
        r = c.echo(v)
        assert type(r) is torch.Tensor and r.dtype == dt and r.data_ptr() == v.data_ptr(), dt
    c.assert_held_then_released(t, c.echo)


def check_callback_receives_torch_tensor(c: Ctx) -> None:
    """tvm_ffi.convert_func(cb, tensor_cls=torch.Tensor): when tvm-ffi calls the Python callback, tensor
    arguments arrive as torch.Tensor made by the table's managed_tensor_to_py_object_no_sync, aliasing the
    caller's memory; writes made in the callback are visible to the caller; a torch tensor the callback
    returns comes back to the caller as a torch.Tensor on the same memory."""
    torch, tvm_ffi = c.torch, c.tvm_ffi
    got = []

    def cb(x):
        got.append((type(x), x.data_ptr(), tuple(x.shape), x.stride()))
        x[0] = 42.0
        return x[1:]

    f = tvm_ffi.convert_func(cb, tensor_cls=torch.Tensor)
    t = torch.zeros(4, 2)
    r = f(t)
    assert got == [(torch.Tensor, t.data_ptr(), (4, 2), (2, 1))]
    assert torch.equal(t[0], torch.tensor([42.0, 42.0]))
    assert type(r) is torch.Tensor and r.data_ptr() == t[1:].data_ptr() and r.shape == (3, 2)


def check_kernel_writes_visible(c: Ctx) -> None:
    """A compiled tvm-ffi kernel (load_inline) writing through the exported pointer changes the torch
    tensor in place, for a whole tensor and for an offset view (row 1 only)."""
    torch = c.torch
    mod = c.kernels()
    t = torch.zeros(3, 4)
    mod.fill(t, 7.0)
    assert torch.equal(t, torch.full((3, 4), 7.0))
    mod.fill(t[1], -1.0)
    assert torch.equal(t[1], torch.full((4,), -1.0)) and torch.equal(t[0], t[2])


def check_env_alloc_returns_torch_tensor(c: Ctx) -> None:
    """A compiled kernel that allocates its output with TVMFFIEnvTensorAlloc (the caller's table's
    managed_tensor_allocator, proven by check_call_uses_published_table) returns a torch.Tensor holding the
    kernel's values (allocator -> tvm-ffi Tensor -> managed_tensor_to_py_object_no_sync), which outlives the
    call and owns its memory."""
    torch = c.torch
    mod = c.kernels()
    like = torch.empty(5, 3)
    out = mod.alloc_filled(like, 2.5)
    assert type(out) is torch.Tensor and out.shape == (5, 3) and out.dtype == torch.float32
    assert out.data_ptr() != like.data_ptr()
    del like
    gc.collect()
    assert torch.equal(out, torch.full((5, 3), 2.5))
    out += 1
    assert torch.equal(out, torch.full((5, 3), 3.5))


def check_cache_is_per_type_at_first_use(c: Ctx) -> None:
    """tvm-ffi binds a type to the table it finds at that type's first use in a call, for the process:
    after torch.Tensor was first passed under torch's table, install(prefer="bridge") does not change what
    function calls with torch.Tensor use (even new functions), while from_dlpack (looked up per call) and
    types first seen after the switch (nn.Parameter, a subclass) use ours. Hence: publish before first use."""
    torch, bridge = c.torch, c.bridge
    assert c.native is not None, "needs torch's native table (torch >= 2.10)"
    t = torch.arange(3.0)
    assert c.allocator_seen_by(t) == c.slot(c.native, 0)
    bridge.install(prefer="bridge")
    assert bridge.active_provider()[bridge.CAPSULE_ATTR] == "torch_dlpack_bridge"
    assert c.allocator_seen_by(t) == c.slot(c.native, 0)  # still torch's: cached per type

    class Sub(torch.Tensor):
        pass

    assert c.allocator_seen_by(torch.nn.Parameter(torch.zeros(2))) == c.slot(c.ours, 0)
    assert c.allocator_seen_by(t.as_subclass(Sub)) == c.slot(c.ours, 0)
    x = c.tvm_ffi.from_dlpack(torch.zeros(2, 3))
    assert x.shape == (2, 3)
    conj = torch.tensor([1 + 2j]).conj()
    try:  # our table refuses (then torch's __dlpack__ refuses): from_dlpack saw the switch
        c.tvm_ffi.from_dlpack(conj)
    except BufferError:
        pass
    else:
        raise AssertionError("from_dlpack did not use the newly published table")


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}
_COMMON = ["published_table", "call_uses_published_table", "refusal_fingerprint", "shape_snapshot_fingerprint",
           "from_dlpack_aliases", "echo_returns_torch_tensor", "callback_receives_torch_tensor",
           "kernel_writes_visible", "env_alloc_returns_torch_tensor"]
SCENARIOS = {
    "bridge": _COMMON,
    "torch": _COMMON,
    "legacy_int": ["published_table", "call_uses_published_table", "refusal_fingerprint",
                   "echo_returns_torch_tensor"],
    "switch_after_first_use": ["cache_is_per_type_at_first_use"],
}
# Scenarios about torch's own table, which torch < 2.10 does not have (there the default policy publishes ours,
# which is the "bridge" scenario); each check of them is skipped there, with this reason.
NEEDS_NATIVE = {
    "torch": "scenario of torch's own table: this torch (< 2.10) has none (its default is ours: see 'bridge')",
    "switch_after_first_use": "switches from torch's own table to ours: this torch (< 2.10) has no table",
}
# Known failures, as {(scenario, check): reason}; each becomes xfail(strict=True).
XFAIL: dict = {}


def child_main(scenario: str, build_dir: str) -> None:
    results = {}
    try:
        ctx = Ctx(scenario, build_dir)
        ctx.publish_then_import()
    except BaseException:  # setup failed: every check fails with the same reason
        tb = traceback.format_exc()
        results = {name: {"ok": False, "error": tb} for name in SCENARIOS[scenario]}
    else:
        for name in SCENARIOS[scenario]:
            try:
                CHECKS[name](ctx)
                results[name] = {"ok": True}
            except BaseException:
                results[name] = {"ok": False, "error": traceback.format_exc()}
    sys.stdout.flush()
    print("\n@@RESULTS@@" + json.dumps(results))


# =========================================================================================================
# Parent side (pytest).
# =========================================================================================================

def _start_child(scenario: str, build_dir: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
    env.pop("TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API", None)  # would make tvm-ffi ignore every table
    env.pop("TORCH_DLPACK_BRIDGE_PREFER", None)
    if scenario == "legacy_int":
        env["TVM_FFI_DISABLE_TORCH_C_DLPACK"] = "0"  # its loader is what upgrades the legacy int
    else:
        env["TVM_FFI_DISABLE_TORCH_C_DLPACK"] = "1"  # no backport can stand in for the published table
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), scenario, build_dir], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish_child(proc: subprocess.Popen) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    marker = "\n@@RESULTS@@"
    if proc.returncode != 0 or marker not in stdout:
        return {"__crash__": f"child exited with {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"}
    return json.loads(stdout.rsplit(marker, 1)[1])


@pytest.fixture(scope="module")
def scenario_results(request, tmp_path_factory):
    """Runs, in parallel, one child per scenario that the session selected; results by scenario."""
    if importlib.util.find_spec("tvm_ffi") is None:
        pytest.skip("apache-tvm-ffi is not installed")
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    build_dir = str(cache.mkdir("tvm_ffi_interop_build") if cache else tmp_path_factory.mktemp("tvm_ffi_build"))
    wanted = {item.callspec.params["scenario"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "scenario" in item.callspec.params}
    # the first compile of the kernel module happens in one child; the others wait on tvm-ffi's build lock
    running = {name: _start_child(name, build_dir) for name in SCENARIOS if name in wanted}
    done = {}

    def get(scenario: str) -> dict:
        if scenario not in done:
            done[scenario] = _finish_child(running.pop(scenario))
        return done[scenario]

    yield get
    for proc in running.values():  # only left over if a test was deselected after collection
        proc.kill()
        proc.communicate()


def _params():
    import torch_dlpack_bridge

    no_native = torch_dlpack_bridge._native_capsule() is None
    for scenario, checks in SCENARIOS.items():
        for check in checks:
            reason = XFAIL.get((scenario, check))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            if scenario in NEEDS_NATIVE and no_native:
                marks.append(pytest.mark.skip(reason=NEEDS_NATIVE[scenario]))
            yield pytest.param(scenario, check, id=f"{scenario}-{check}", marks=marks)


@pytest.mark.parametrize("scenario, check", list(_params()))
def test_interop(scenario_results, scenario, check):
    """One check of one scenario, run in that scenario's child interpreter; see check_<name>'s docstring."""
    results = scenario_results(scenario)
    if "__crash__" in results:
        pytest.fail(results["__crash__"], pytrace=False)
    outcome = results[check]
    if not outcome["ok"]:
        pytest.fail(f"{check} failed in the {scenario!r} child:\n{outcome['error']}", pytrace=False)


def test_every_check_is_scheduled():
    """Each check_* function runs in at least one scenario."""
    scheduled = {name for checks in SCENARIOS.values() for name in checks}
    assert scheduled == set(CHECKS)


if __name__ == "__main__":
    child_main(sys.argv[1], sys.argv[2])
