"""The conformance cases. Each is a function of a Context that returns (comparisons made, detail) for a PASS,
or raises Fail (expected vs seen) or Skip (why). A case that compared nothing is a SKIP, never a PASS. CASES
lists them in report order, with one line each on what they pin.
"""

from __future__ import annotations

import ctypes
import gc
import struct
import sys
import time
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _abi
from ._abi import describe, numel
from .interpreter import describe_exit, run_child, say

Passed = Tuple[int, str]  # (how many comparisons the case made, what it saw)


class Fail(Exception):
    """The case failed: the message says what was expected and what was seen."""


class Skip(Exception):
    """The case does not apply here: the message says why."""


class Context:
    """What every case sees: the target, and the table its tensor type publishes (None if there is none)."""

    def __init__(self, target, exit_probe_command: Optional[Callable[[], List[str]]] = None,
                 deadline: Optional[float] = None):
        self.target = target
        self.type = target.table_type()
        self.capsule = getattr(self.type, _abi.CAPSULE_ATTR, None)
        self.legacy = getattr(self.type, _abi.INT_ATTR, None)
        address = 0
        if self.capsule is not None and _abi.is_capsule(self.capsule):
            address = _abi.capsule_pointer(self.capsule, _abi.capsule_name(self.capsule))
        self.table = _abi.Table(address) if address else None
        self.exit_probe_command = exit_probe_command  # made when the case runs (it carries the time left)
        self.deadline = deadline if deadline is not None else time.monotonic() + 600  # of the whole check
        self._corpus: Optional[List[Tuple[str, Any, Any, Any, Any]]] = None

    def need_table(self) -> _abi.Table:
        if self.table is None:
            raise Skip(f"{self.type.__name__} publishes no readable {_abi.CAPSULE_ATTR}")
        return self.table

    def need(self, function: str) -> _abi.Table:
        table = self.need_table()
        if not table.pointer(function):
            raise Skip(f"{function} is NULL")
        return table

    def corpus(self) -> List[Tuple[str, Any, Any, Any, Any]]:
        """(label, tensor, reference description or None, the reference's refusal, its capsule), built once."""
        if self._corpus is None:
            corpus = []  # cached only once whole: a corpus that raised is not an empty one for the next case
            for label, obj in self.target.corpus():
                ref, refusal, capsule = _abi.reference(obj)
                corpus.append((label, obj, ref, refusal, capsule))
            self._corpus = corpus
        return self._corpus


def differences(ref: Dict[str, Any], got: Dict[str, Any], with_flags: bool) -> List[str]:
    """How `got` disagrees with the reference `__dlpack__()` description: the start address only where there
    are elements, strides only of dims with more than one element (others are never used)."""
    if got.get("ndim") != ref["ndim"]:
        return [f"ndim {ref['ndim']} expected, {got.get('ndim')} seen"]
    out = [f"{key} {ref[key]} expected, {got[key]} seen"
           for key in ("shape", "dtype", "device") if ref[key] != got[key]]
    n = numel(ref["shape"])
    if n > 0 and ref["address"] != got["address"]:
        out.append(f"data+byte_offset {ref['address']:#x} expected, {got['address']:#x} seen "
                   f"(data {got['data']:#x}, byte_offset {got['byte_offset']})")
    if ref["ndim"] > 0 and got["strides"] is None:
        out.append("strides NULL (DLPack >= 1.2 requires them when ndim > 0)")
    elif n > 0 and ref["strides"] is not None:
        used = [i for i, size in enumerate(ref["shape"]) if size > 1]
        if [ref["strides"][i] for i in used] != [got["strides"][i] for i in used]:
            out.append(f"strides {ref['strides']} expected, {got['strides']} seen")
    if with_flags and ref["flags"] is not None:
        mask = _abi.READ_ONLY | _abi.IS_COPIED
        if (ref["flags"] & mask) != (got["flags"] & mask):
            out.append(f"flags {ref['flags']} expected, {got['flags']} seen")
    return out


def _grouped(failures: Dict[str, List[str]], checked: int, what: str) -> Passed:
    """PASS, or Fail with the failures grouped: "what went wrong for labels" (six groups at most)."""
    if failures:
        count = len({label for labels in failures.values() for label in labels})
        shown = [f"{problem} for {', '.join(labels[:4])}{f' and {len(labels) - 4} more' if len(labels) > 4 else ''}"
                 for problem, labels in failures.items()]
        raise Fail(f"{count} of {checked} {what}: " + "; ".join(shown[:6]) +
                   (f"; and {len(shown) - 6} more" if len(shown) > 6 else ""))
    return checked, f"{checked} {what} agree"


def _is_buffer_error(error: Optional[BaseException]) -> bool:
    return error is not None and isinstance(error, BufferError)


# --------------------------------------------------------------------------------------------- publishing


def publish_capsule(ctx: Context) -> Passed:
    capsule = ctx.capsule
    if capsule is None:
        raise Fail(f"{ctx.type.__name__}.{_abi.CAPSULE_ATTR} expected, none seen")
    if not _abi.is_capsule(capsule):
        raise Fail(f"a PyCapsule expected, {type(capsule).__name__} seen")
    name = _abi.capsule_name(capsule)
    if name != _abi.CAPSULE_NAME:
        raise Fail(f"capsule name {_abi.CAPSULE_NAME.decode()!r} expected, {name!r} seen")
    if ctx.table is None:
        raise Fail("a non-NULL table pointer expected, NULL seen")
    return 1, f"capsule {name.decode()!r} on {ctx.type.__module__}.{ctx.type.__qualname__} -> {ctx.table.address:#x}"


def publish_legacy_int(ctx: Context) -> Passed:
    legacy = ctx.legacy
    if legacy is None:
        raise Skip(f"no legacy {_abi.INT_ATTR} (only DLPack 1.2 consumers read it)")
    table = ctx.need_table()
    if _abi.is_capsule(legacy):
        address = _abi.capsule_pointer(legacy, _abi.capsule_name(legacy))
        raise Fail(f"an int expected (DLPack 1.2 consumers call int() on it), a PyCapsule seen "
                   f"({'same' if address == table.address else 'another'} table)")
    if not isinstance(legacy, int):
        raise Fail(f"an int expected, {type(legacy).__name__} seen")
    if legacy != table.address:
        raise Fail(f"{table.address:#x} (the capsule's table) expected, {legacy:#x} seen")
    return 1, f"int {legacy:#x} is the capsule's table"


def header_version(ctx: Context) -> Passed:
    version = ctx.need_table().api.header.version
    if version.major != 1 or version.minor < 2:
        raise Fail(f"major 1, minor >= 2 expected, {version.major}.{version.minor} seen")
    return 1, f"{version.major}.{version.minor}"


def header_prev_api(ctx: Context) -> Passed:
    header = ctx.need_table().api.header
    seen = {ctypes.addressof(header)}
    chain = [f"{header.version.major}.{header.version.minor}"]
    newer = (header.version.major, header.version.minor)
    while header.prev_api:
        address = ctypes.cast(header.prev_api, ctypes.c_void_p).value
        if address in seen or len(seen) > 16:
            raise Fail(f"a chain ending in NULL expected, a cycle seen after {' -> '.join(chain)}")
        seen.add(address)
        header = header.prev_api.contents
        version = (header.version.major, header.version.minor)
        chain.append(f"{version[0]}.{version[1]}")
        if version >= newer:
            raise Fail(f"older versions down the chain expected, {' -> '.join(chain)} seen")
        newer = version
    return len(chain), " -> ".join(chain + ["NULL"])


def header_functions(ctx: Context) -> Passed:
    table = ctx.need_table()
    missing = [name for name in _abi.FUNCTIONS if name not in _abi.OPTIONAL and not table.pointer(name)]
    if missing:
        raise Fail(f"every required function expected, NULL seen for {', '.join(missing)}")
    optional = [name for name in _abi.OPTIONAL if not table.pointer(name)]
    return len(_abi.FUNCTIONS), ("all five set" if not optional else
                                 f"required four set ({', '.join(optional)} NULL, allowed)")


# --------------------------------------------------------------------------------------------- exports


def _corpus_case(ctx: Context, export: Callable[[Any], Tuple[_abi.Outcome, Optional[Dict[str, Any]]]],
                 with_flags: bool) -> Passed:
    failures: Dict[str, List[str]] = {}  # what went wrong -> the tensors it went wrong for
    unchecked: List[str] = []  # exported by the table, refused by __dlpack__: nothing to compare with
    why = ""  # __dlpack__'s first refusal of those
    compared = refused = 0
    corpus = ctx.corpus()
    for label, obj, ref, refusal, _capsule in corpus:
        outcome, got = export(obj)
        seen = "an export" if outcome.ok else (type(outcome.error).__name__ if outcome.error else str(outcome))
        if not outcome.ok and outcome.error is None:  # a failure a consumer cannot report: always wrong
            failures.setdefault(f"-1 with a Python exception expected, {outcome} seen", []).append(label)
        elif ref is None:
            if outcome.ok:
                unchecked.append(label)
                why = why or f"{type(refusal).__name__}: {refusal}"
            elif isinstance(refusal, BufferError) and not _is_buffer_error(outcome.error):
                failures.setdefault(f"BufferError expected (as __dlpack__), {seen} seen", []).append(label)
            else:
                refused += 1
        elif not outcome.ok:
            failures.setdefault(f"an export expected (as __dlpack__), {outcome} seen", []).append(label)
        else:
            compared += 1
            for d in differences(ref, got, with_flags):
                failures.setdefault(d, []).append(label)
    if not compared and not failures:
        if unchecked:
            raise Fail(f"tensors that __dlpack__ describes expected (the exports are compared with it), none seen: "
                       f"__dlpack__ refuses all {len(unchecked)} that the table exports ({', '.join(unchecked[:3])}"
                       f"{', ...' if len(unchecked) > 3 else ''}; {why}): nothing compared")
        raise Skip(f"no tensor of the corpus ({len(corpus)}) exported by both __dlpack__ and the table")
    _grouped(failures, len(corpus), "tensors")
    return compared, (f"{compared} tensors agree" + (f", {refused} refused by both" if refused else "") +
                      (f" ({', '.join(unchecked)}: exported, though __dlpack__ refuses them: not compared)"
                       if unchecked else ""))


def export_dltensor(ctx: Context) -> Passed:
    table = ctx.need("dltensor_from_py_object_no_sync")

    def export(obj):
        outcome, out = table.dltensor(obj)
        return outcome, (describe(out) if outcome.ok else None)

    return _corpus_case(ctx, export, with_flags=False)


def _managed_description(table: _abi.Table, obj: Any) -> Tuple[_abi.Outcome, Optional[Dict[str, Any]]]:
    outcome, managed = table.export(obj)
    if managed is None:
        return outcome, None
    try:
        m = managed.struct
        if m.version.major != 1:
            return _abi.Outcome(-1, ValueError(f"version {m.version.major}.{m.version.minor}")), None
        return outcome, describe(m.dl_tensor, m.flags)
    finally:
        managed.release()


def export_managed(ctx: Context) -> Passed:
    table = ctx.need("managed_tensor_from_py_object_no_sync")
    return _corpus_case(ctx, lambda obj: _managed_description(table, obj), with_flags=True)


def export_refuses_undescribable(ctx: Context) -> Passed:
    table = ctx.need_table()
    views = ctx.target.undescribable()
    if not views:
        raise Skip("the target names no view DLPack cannot describe")
    seen: Dict[str, Tuple[List[str], List[str]]] = {}  # what was seen instead of BufferError -> (views, functions)
    checked = 0
    for label, obj, _why in views:
        outcome, managed = table.export(obj)
        if managed is not None:
            managed.release()
        results = [("managed", outcome)]
        if table.pointer("dltensor_from_py_object_no_sync"):
            results.append(("dltensor", table.dltensor(obj)[0]))
        for function, outcome in results:
            checked += 1
            if not _is_buffer_error(outcome.error):
                what = "an export" if outcome.ok else (type(outcome.error).__name__ if outcome.error else str(outcome))
                labels, functions = seen.setdefault(what, ([], []))
                if label not in labels:
                    labels.append(label)
                if function not in functions:
                    functions.append(function)
    if seen:
        raise Fail("BufferError expected; " + "; ".join(
            f"{what} seen for {', '.join(labels)} ({' and '.join(functions)})" for what, (labels, functions)
            in seen.items()))
    return checked, f"{len(views)} views refused with BufferError: {', '.join(label for label, _, _ in views)}"


# --------------------------------------------------------------------------------------------- ownership


def _export_sample(ctx: Context, value: float):
    table = ctx.need("managed_tensor_from_py_object_no_sync")
    source = ctx.target.sample(value)
    outcome, managed = table.export(source)
    if managed is None or not outcome.ok:
        raise Fail(f"an export of a float32 CPU tensor expected, {outcome} seen")
    return source, managed


def ownership_deleter_releases(ctx: Context) -> Passed:
    source, managed = _export_sample(ctx, 1.0)
    try:
        ref = weakref.ref(ctx.target.owner(source))
    except TypeError:
        managed.release()
        raise Skip(f"{type(source).__name__} takes no weak references: what the deleter releases is not seen")
    del source
    gc.collect()
    kept = ref() is not None
    managed.release()
    gc.collect()
    if ref() is not None:
        raise Fail("the source object released once the deleter ran expected, still alive seen (a leak)")
    return 1, ("the export kept the source object alive until the deleter ran" if kept
            else "the export keeps the memory, not the object; the deleter ran once without error")


def ownership_release_on_other_thread(ctx: Context) -> Passed:
    source, managed = _export_sample(ctx, 2.0)
    thread = threading.Thread(target=managed.release, name="releaser")
    thread.start()
    thread.join(30)
    if thread.is_alive():
        raise Fail("the deleter to return on a thread without the GIL expected, a hang seen (30 s)")
    return 1, "the deleter ran on another thread (called without the GIL, as DLPack allows)"


def ownership_release_after_source_gone(ctx: Context) -> Passed:
    source, managed = _export_sample(ctx, 7.0)
    d = describe(managed.struct.dl_tensor)
    size = _abi.nbytes(d)
    before = ctypes.string_at(d["address"], size)
    del source
    gc.collect()
    churn = [ctx.target.sample(-1.0) for _ in range(32)]  # a freed block would be handed out and overwritten
    after = ctypes.string_at(d["address"], size)
    del churn
    managed.release()
    if after != before:
        raise Fail("the exported memory unchanged after the source died expected, overwritten seen "
                   "(the export does not keep the memory alive)")
    return 1, f"{size} bytes unchanged after the source died and {32 * size} bytes were allocated"


def ownership_release_at_exit(ctx: Context) -> Passed:
    ctx.need("managed_tensor_from_py_object_no_sync")
    if ctx.exit_probe_command is None:
        raise Skip("no command for a second interpreter")
    # In this interpreter's process group (the check's deadline kills it with this one); it ends a little
    # before that deadline, so that it is this case that says so.
    seconds = max(1.0, min(300.0, ctx.deadline - time.monotonic() - 5))
    result = run_child(ctx.exit_probe_command(), time.monotonic() + seconds, own_group=False)
    if result.timed_out:
        raise Fail(f"the second interpreter to exit expected, still running seen: {describe_exit(result, seconds)} "
                   f"(killed)")
    tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
    if result.code != 0 or {"exit-probe": "deleters pending"} not in result.messages:
        raise Fail(f"a clean exit expected, {describe_exit(result, seconds)} seen: {' | '.join(tail)}")
    return 2, "deleters called from atexit and while the interpreter finalizes: clean exit"


def exit_probe(target) -> None:
    """In a second interpreter: exports two tensors and releases one in an atexit handler, the other from an
    object's __del__ while the interpreter finalizes (module globals cleared), after the sources are gone."""
    import atexit

    ctx = Context(target)
    _, first = _export_sample(ctx, 3.0)
    _, second = _export_sample(ctx, 4.0)

    class ReleaseAtFinalize:
        def __init__(self, managed):
            self.managed = managed

        def __del__(self):
            self.managed.release()

    atexit.register(first.release)
    sys.modules["__main__"].__dict__["_tdb_release_at_finalize"] = ReleaseAtFinalize(second)
    say({"exit-probe": "deleters pending"})


def to_python_shares_memory(ctx: Context) -> Passed:
    table = ctx.need("managed_tensor_to_py_object_no_sync")
    _need_counter()
    buffer = (ctypes.c_float * 12)(*range(12))
    address, calls = _abi.own_tensor(ctypes.addressof(buffer), (2, 32, 1), (3, 4), (4, 1), keep=buffer)
    outcome, obj = table.to_python(address)
    if not outcome.ok or obj is None:
        raise Fail(f"an import of a (3, 4) float32 CPU tensor expected, {outcome} seen (deleter calls: {calls()})")
    ref, refusal, capsule = _abi.reference(obj)
    if ref is None:
        raise Fail(f"the imported object's __dlpack__ to work expected, {type(refusal).__name__}: {refusal} seen")
    problems = []
    if ref["address"] != ctypes.addressof(buffer) or ref["shape"] != (3, 4):
        problems.append(f"the same memory, shape (3, 4) expected, {ref['address']:#x} {ref['shape']} seen "
                        f"(buffer {ctypes.addressof(buffer):#x})")
    if calls():
        problems.append(f"no deleter call while the object lives expected, {calls()} seen")
    del obj, capsule, ref
    gc.collect()
    if calls() != 1:
        problems.append(f"one deleter call once the object died expected, {calls()} seen")
    if problems:
        raise Fail("; ".join(problems))
    return 1, "shares memory; the deleter ran once when the object died"


def to_python_owns_on_failure(ctx: Context) -> Passed:
    table = ctx.need("managed_tensor_to_py_object_no_sync")
    _need_counter()
    failures = []
    for label, kwargs in (("major version 2", dict(version=(2, 0))), ("dtype code 99", dict(dtype=(99, 32, 1))),
                          ("float32 with 4 lanes", dict(dtype=(2, 32, 4)))):
        buffer = (ctypes.c_float * 16)()
        address, calls = _abi.own_tensor(ctypes.addressof(buffer), kwargs.get("dtype", (2, 32, 1)), (4,), (1,),
                                         version=kwargs.get("version", (1, 3)), keep=buffer)
        outcome, obj = table.to_python(address)
        if outcome.ok:
            failures.append(f"{label}: a refusal expected, an import seen")
            del obj
            gc.collect()
            continue
        gc.collect()
        if outcome.error is None:
            failures.append(f"{label}: a Python exception expected, {outcome} seen")
        if calls() != 1:
            failures.append(f"{label}: the deleter called once on failure expected, {calls()} calls seen")
    if failures:
        raise Fail("; ".join(failures))
    return 3, "3 bad tensors refused with an exception, each deleter called once"


def _need_counter() -> None:
    if not _abi.COUNTING_DELETER:
        raise Skip("no libc sem_post here to count the deleter's calls with")


FLOAT32 = (2, 32, 1)


def _values(d: Dict[str, Any]) -> List[float]:
    """A float32 tensor's elements in row-major order, read through its description (strides in elements)."""
    shape, strides = d["shape"], d["strides"]
    if strides is None:  # before DLPack 1.2: compact row-major
        strides, step = [], 1
        for size in reversed(shape):
            strides.insert(0, step)
            step *= size
    out: List[float] = []

    def walk(dim: int, offset: int) -> None:
        if dim == len(shape):
            out.append(struct.unpack("f", ctypes.string_at(d["address"] + 4 * offset, 4))[0])
            return
        for i in range(shape[dim]):
            walk(dim + 1, offset + i * strides[dim])

    if numel(shape) > 0:
        walk(0, 0)
    return out


def _listed(values: Any) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]" if isinstance(values, list) else str(values)


def _import_case(shape: Optional[Tuple[int, ...]], strides: Optional[Tuple[int, ...]], start: Optional[int] = 0,
                 byte_offset: int = 0, must_refuse: bool = False) -> CaseFn:
    """A case that hands the producer one float32 CPU tensor of the checker's own (elements 0, 1, ... 15):
    data at element `start` (None: NULL), `shape` and `strides` as given (None: a NULL pointer). The producer
    either imports it, and the object shows the same elements (through its own `__dlpack__()`), or refuses it
    with a Python exception; either way the deleter is called exactly once. `must_refuse`: importing is wrong."""

    def case(ctx: Context) -> Passed:
        table = ctx.need("managed_tensor_to_py_object_no_sync")
        _need_counter()
        buffer = (ctypes.c_float * 16)(*range(16))
        data = None if start is None else ctypes.addressof(buffer) + 4 * start
        address, calls = _abi.own_tensor(data, FLOAT32, shape, strides, keep=buffer, byte_offset=byte_offset)
        mine = {"address": (data or 0) + byte_offset, "shape": shape or (), "strides": strides}
        expected = None if must_refuse else (mine["shape"], _values(mine))
        outcome, obj = table.to_python(address)
        if obj is None or not outcome.ok:
            del obj
            gc.collect()
            problems = [] if outcome.error is not None else [f"a Python exception expected, {outcome} seen"]
            if calls() != 1:
                problems.append(f"the deleter called once on refusal expected, {calls()} calls seen")
            if problems:
                raise Fail("; ".join(problems))
            return 1, f"refused ({outcome}); the deleter called once"
        problems = []
        ref, refusal, capsule = _abi.reference(obj)
        if expected is None:
            problems.append("a refusal expected, an import seen")
        elif ref is None:
            problems.append(f"the imported object's __dlpack__ to work expected, {type(refusal).__name__}: "
                            f"{refusal} seen")
        else:
            seen = (ref["shape"], _values(ref) if ref["dtype"] == FLOAT32 else f"dtype {ref['dtype']}")
            if seen != expected:
                problems.append(f"shape {expected[0]}, elements {_listed(expected[1])} expected, "
                                f"{seen[0]}, {_listed(seen[1])} seen")
        del obj, capsule, ref
        gc.collect()
        if calls() != 1:
            problems.append(f"one deleter call once the object died expected, {calls()} seen")
        if problems or expected is None:
            raise Fail("; ".join(problems))
        n = len(expected[1])
        elements = f"{n} element{'s' if n > 1 else ''} right" if n else "no elements"
        return 1 + n, f"imported: shape {expected[0]}, {elements}; the deleter called once"

    return case


# --------------------------------------------------------------------------------------------- allocator


def _prototype(dtype, shape, device=(1, 0)) -> Tuple[_abi.DLTensor, Any]:
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    t = _abi.DLTensor(None, _abi.DLDevice(*device), ndim, _abi.DLDataType(*dtype),
                      ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)), None, 0)
    return t, shape_arr


def allocator_prototype(ctx: Context) -> Passed:
    table = ctx.need("managed_tensor_allocator")
    # the corpus's dtypes (as __dlpack__ labels them), and float32, which every target's sample is
    dtypes = sorted({ref["dtype"] for _, _, ref, _, _ in ctx.corpus() if ref is not None} | {(2, 32, 1)})
    failures: Dict[str, List[str]] = {}
    checked = 0
    for dtype in dtypes:
        for shape in ((), (0,), (3, 5), (2, 1, 4)):
            prototype, _keep = _prototype(dtype, shape)
            outcome, managed, errors = table.allocate(prototype)
            checked += 1
            label = f"{dtype} {shape}"
            if not outcome.ok or managed is None:
                failures.setdefault(f"an allocation expected, {outcome} seen (SetError: {errors})", []).append(label)
                continue
            try:
                d = describe(managed.struct.dl_tensor)
                if errors:
                    failures.setdefault(f"no SetError call on success expected, {errors} seen", []).append(label)
                if (d["shape"], d["dtype"], d["device"]) != (shape, dtype, (1, 0)):
                    seen = f"{d['shape']} {d['dtype']} {d['device']}"
                    failures.setdefault(f"the prototype's shape, dtype, device expected, {seen} seen", []).append(label)
                    continue
                if numel(shape) > 0 and not d["address"]:
                    failures.setdefault("memory expected, NULL data seen", []).append(label)
                row_major, step = [], 1
                for size in reversed(shape):
                    row_major.insert(0, step)
                    step *= size
                used = [i for i, size in enumerate(shape) if size > 1]
                strides = d["strides"]
                if (strides is None and shape) or (strides and [strides[i] for i in used] !=
                                                   [row_major[i] for i in used]):
                    failures.setdefault(f"compact row-major strides expected, {strides} seen", []).append(label)
            finally:
                managed.release()
    return _grouped(failures, checked, "allocations")


def allocator_impossible(ctx: Context) -> Passed:
    table = ctx.need("managed_tensor_allocator")
    failures = []
    for label, dtype, device in (("dtype code 99", (99, 32, 1), (1, 0)), ("device type 99", (2, 32, 1), (99, 0)),
                                 ("float32 with 4 lanes", (2, 32, 4), (1, 0))):
        prototype, _keep = _prototype(dtype, (4,), device)
        outcome, managed, errors = table.allocate(prototype)
        if managed is not None:
            managed.release()
        if outcome.ok:
            failures.append(f"{label}: -1 expected, an allocation seen")
            continue
        if outcome.error is not None:
            failures.append(f"{label}: no Python exception (the error goes through SetError) expected, "
                            f"{type(outcome.error).__name__} left set seen")
        elif outcome.rc != -1:
            failures.append(f"{label}: -1 expected, {outcome.rc} seen")
        if len(errors) != 1:
            failures.append(f"{label}: one SetError call expected, {len(errors)} seen")
    if failures:
        raise Fail("; ".join(failures))
    return 3, "3 impossible prototypes: -1, one SetError call each, no Python exception"


# --------------------------------------------------------------------------------------------- errors, streams


WRONG_TYPES = (("None", None), ("int", 42), ("str", "tensor"), ("list", [1.0, 2.0]), ("object", object()))


def errors_wrong_type(ctx: Context) -> Passed:
    table = ctx.need_table()
    failures, checked = [], 0
    for label, obj in WRONG_TYPES:
        calls = [("managed", lambda o: table.export(o))]
        if table.pointer("dltensor_from_py_object_no_sync"):
            calls.append(("dltensor", lambda o: table.dltensor(o)))
        for name, call in calls:
            checked += 1
            outcome, out = call(obj)
            if name == "managed" and out is not None:
                out.release()
            if outcome.error is None:
                failures.append(f"{name}({label}): -1 with a Python exception expected, "
                                f"{'an export' if outcome.ok else outcome} seen")
    if failures:
        raise Fail("; ".join(failures))
    return checked, f"{len(WRONG_TYPES)} wrong types refused with a Python exception by each export"


def stream_current_work_stream(ctx: Context) -> Passed:
    table = ctx.need("current_work_stream")
    seen, failures = [], []
    for device in ctx.target.devices():
        outcome, stream = table.stream(*device)
        if not outcome.ok:
            failures.append(f"device {device}: 0 expected, {outcome} seen")
        elif stream == 0xDEAD:
            failures.append(f"device {device}: the stream written to `out` expected, `out` untouched seen")
        else:
            seen.append(f"{device}: {'NULL' if stream == 0 else hex(stream)}")
    if failures:
        raise Fail("; ".join(failures))
    return len(seen), "; ".join(seen) + " (no GPU here: only these devices are checked)"


# --------------------------------------------------------------------------------------------- threads


def threads_concurrent_exports(ctx: Context) -> Passed:
    table = ctx.need("managed_tensor_from_py_object_no_sync")
    usable = [(label, obj, ref) for label, obj, ref, _, _ in ctx.corpus()
              if ref is not None and _managed_description(table, obj)[0].ok]
    shapes: Dict[Any, int] = {}  # one tensor of each shape first: arrays shared between exports then show
    for i, (_, _, ref) in enumerate(usable):
        shapes.setdefault((ref["shape"], ref["strides"]), i)
    first = sorted(shapes.values())
    objs = ([usable[i] for i in first] + [x for i, x in enumerate(usable) if i not in first])[:16]
    if not objs:
        raise Skip("no tensor of the corpus is exported by both __dlpack__ and the table")
    failures: List[str] = []
    lock = threading.Lock()

    def work():
        held = []
        for _ in range(20):
            for label, obj, ref in objs:
                outcome, managed = table.export(obj)
                if managed is None:
                    with lock:
                        failures.append(f"{label}: {outcome}")
                    continue
                held.append((label, ref, managed))
                if table.pointer("dltensor_from_py_object_no_sync"):
                    outcome, out = table.dltensor(obj)
                    if outcome.ok:
                        diff = differences(ref, describe(out), with_flags=False)
                        if diff:
                            with lock:
                                failures.append(f"dltensor {label}: {diff[0]}")
        for label, ref, managed in held:  # read late: a shape or strides array shared between exports shows
            diff = differences(ref, describe(managed.struct.dl_tensor, managed.struct.flags), with_flags=True)
            managed.release()
            if diff:
                with lock:
                    failures.append(f"managed {label}: {diff[0]}")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise Fail(f"{len(failures)} disagreements, e.g. {'; '.join(sorted(set(failures))[:3])}")
    return 8 * 20 * len(objs), (f"8 threads x 20 rounds x {len(objs)} tensors agree (exports held, read after "
                                f"all were made)")


CaseFn = Callable[[Context], Passed]
CASES: List[Tuple[str, CaseFn, str]] = [
    ("publish.capsule", publish_capsule, "`__dlpack_c_exchange_api__` is a `PyCapsule` named `dlpack_exchange_api`"),
    ("publish.legacy-int", publish_legacy_int, "`__c_dlpack_exchange_api__`, if present, is an int of the same table"),
    ("header.version", header_version, "the header's version is 1.x with x >= 2"),
    ("header.prev-api", header_prev_api, "`prev_api` is a chain of older versions ending in NULL"),
    ("header.functions", header_functions, "every required function pointer is set"),
    ("export.dltensor", export_dltensor, "`dltensor_from_py_object_no_sync` agrees with `__dlpack__()` on the corpus"),
    ("export.managed", export_managed,
     "`managed_tensor_from_py_object_no_sync` agrees with `__dlpack__()` on the corpus (flags too)"),
    ("export.refuses-undescribable", export_refuses_undescribable,
     "views DLPack cannot describe are refused with `BufferError`"),
    ("ownership.deleter-releases", ownership_deleter_releases, "the export's deleter releases the source"),
    ("ownership.other-thread", ownership_release_on_other_thread,
     "the deleter works on another thread, called without the GIL"),
    ("ownership.source-gone", ownership_release_after_source_gone,
     "the export keeps the memory alive after the source object is gone"),
    ("ownership.interpreter-exit", ownership_release_at_exit,
     "deleters called at interpreter exit (atexit, finalization) do not crash"),
    ("import.shares-memory", to_python_shares_memory,
     "`managed_tensor_to_py_object_no_sync` shares memory and calls the deleter once"),
    ("import.owns-on-failure", to_python_owns_on_failure,
     "`managed_tensor_to_py_object_no_sync` calls the deleter once when it fails"),
    ("import.negative-strides", _import_case((3, 4), (-4, -1), start=11),
     "a reversed view (negative strides) is imported as it is or refused; the deleter called once"),
    ("import.zero-strides", _import_case((3, 4), (0, 1)),
     "a broadcast view (stride 0) is imported as it is or refused; the deleter called once"),
    ("import.unused-strides", _import_case((1, 4, 1), (-5, 1, 99)),
     "any stride of a size-1 dim (negative, large) is taken as unused, or the tensor refused"),
    ("import.null-data-empty", _import_case((0, 3), (3, 1), start=None),
     "NULL data without elements is an empty tensor, or refused; the deleter called once"),
    ("import.null-data-with-elements", _import_case((4,), (1,), start=None, must_refuse=True),
     "NULL data with elements is refused with a Python exception; the deleter called once"),
    ("import.null-shape-0d", _import_case(None, None, start=5),
     "a 0-d tensor with NULL shape and strides (as DLPack allows) is imported, or refused"),
    ("import.odd-byte-offset", _import_case((4,), (1,), byte_offset=2),
     "a byte_offset that is not a multiple of the element size is honoured, or the tensor refused"),
    ("import.null-strides", _import_case((3, 4), None),
     "NULL strides with ndim > 0 (compact row-major before DLPack 1.2) is imported as such, or refused"),
    ("import.negative-shape", _import_case((2, -3), (3, 1), must_refuse=True),
     "a negative dimension is refused with a Python exception; the deleter called once"),
    ("allocator.prototype", allocator_prototype, "the allocator honours the prototype's shape, dtype and device"),
    ("allocator.impossible", allocator_impossible,
     "an impossible request returns -1 through `SetError`, no Python exception left set"),
    ("errors.wrong-type", errors_wrong_type, "a wrong object type gives -1 with a Python exception"),
    ("stream.current-work-stream", stream_current_work_stream,
     "`current_work_stream` answers for each device type here (NULL allowed for CPU)"),
    ("threads.concurrent-exports", threads_concurrent_exports, "exports from 8 threads at once agree"),
]
NAMES = [name for name, _, _ in CASES]


def run_case(ctx: Context, name: str) -> Dict[str, Any]:
    """One case's result: {"case", "status" (PASS/FAIL/SKIP), "detail", "compared" (comparisons, on a PASS)}."""
    fn = dict((n, f) for n, f, _ in CASES)[name]
    try:
        compared, detail = fn(ctx)
        if compared < 1:
            return {"case": name, "status": "SKIP", "detail": f"nothing compared ({detail})"}
        return {"case": name, "status": "PASS", "detail": detail, "compared": compared}
    except Fail as failure:
        return {"case": name, "status": "FAIL", "detail": str(failure)}
    except Skip as skip:
        return {"case": name, "status": "SKIP", "detail": str(skip)}
    except Exception as error:  # noqa: BLE001: the checker's own trouble with a producer is a failure, shown
        return {"case": name, "status": "FAIL", "detail": f"unexpected {type(error).__name__}: {error}"}
