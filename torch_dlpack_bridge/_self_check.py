"""The self-check of ``python -m torch_dlpack_bridge``: every table function on CPU tensors, then the table
against torch on every device torch reports available (CUDA, ROCm, XPU, MPS, a PrivateUse1 backend), up to
MAX_DEVICES of each type.

Nothing here launches a kernel: tensors are allocated, viewed, and copied between host and device whole and
contiguous (plain copies), so the check needs no compiler and shows the table, not the kernels. Each check
compares with what torch itself does on that device; where torch cannot do it either (no stream handle, no
allocator), the line says so ("n/a") rather than pass or fail.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, List, Optional, Tuple

import torch

from torch_dlpack_bridge import _probe

CPU = (1, 0)
FLOAT32 = (2, 32, 1)
kDLCUDAHost, kDLMetal, kDLROCM, kDLROCMHost = 3, 8, 10, 11
DL_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 8: "kDLMetal", 10: "kDLROCM", 11: "kDLROCMHost",
            12: "kDLExtDev", 14: "kDLOneAPI"}
MAX_DEVICES = 4
OK, FAIL, NA = "ok", "FAIL", "n/a"
Result = Tuple[str, str, str]  # (check, OK/FAIL/NA, detail)


class NotApplicable(Exception):
    """torch itself cannot do, on this device, what the check compares with (the message says why)."""


def first_line(error: BaseException) -> str:
    """torch's messages run to pages (a dispatcher error lists every backend): its first sentence says which."""
    line = (str(error).splitlines() or [""])[0]
    return line if len(line) < 160 else line.split(". ")[0] + "."


def run_checks(checks) -> List[Result]:
    """Runs each (name, body) in turn: the body returns its detail, fails with an exception, or raises
    NotApplicable. A failed check is reported, not raised."""
    results: List[Result] = []
    for name, body in checks:
        try:
            results.append((name, OK, body()))
        except NotApplicable as e:
            results.append((name, NA, str(e)))
        except Exception as e:
            said = str(e) if isinstance(e, AssertionError) else f"{type(e).__name__}: {first_line(e)}"
            results.append((name, FAIL, said))
    return results


# ---------------------------------------------------------------- CPU: every function, and the refusals

def cpu_checks(api) -> List[Result]:
    """Every function of `api` on CPU tensors through the C probe."""
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).transpose(0, 2)[1:]

    def dltensor() -> str:
        data, device, ndim, dtype, shape, strides, offset = _probe.dltensor(api, t)
        assert (data, device, shape, strides, offset) == (t.data_ptr(), CPU, tuple(t.shape), t.stride(), 0)
        assert dtype == (2, 32, 1) and ndim == 3
        return f"shape {shape} strides {strides}"

    def owning_round_trip() -> str:
        managed = _probe.export(api, t)
        assert managed.version() == (1, 3) and managed.flags() == 0
        back = managed.to_python(api)
        assert back.data_ptr() == t.data_ptr() and torch.equal(back, t)
        return "export -> import aliases the source"

    def allocate() -> str:
        managed = _probe.allocate(api, (5, 7), (2, 16, 1), CPU)
        _, device, _, dtype, shape, strides, _ = managed.info()
        assert (device, dtype, shape, strides) == (CPU, (2, 16, 1), (5, 7), (7, 1))
        out = managed.to_python(api)
        assert out.dtype == torch.float16 and out.shape == (5, 7)
        return "float16 (5, 7) through torch's allocator"

    def stream() -> str:
        assert _probe.current_stream(api, *CPU) == 0
        return "CPU stream is NULL"

    def refusals() -> str:
        for bad, kind in ((t.to_sparse(), BufferError), (torch.ones(2, dtype=torch.complex64).conj(), BufferError),
                          (None, TypeError)):
            try:
                _probe.dltensor(api, bad)
            except kind:
                continue
            raise AssertionError(f"{type(bad).__name__} was not refused with {kind.__name__}")
        return "sparse, conj view and None refused with BufferError/TypeError"

    return run_checks((("dltensor_from_py_object_no_sync", dltensor),
                       ("managed_tensor_from/to_py_object_no_sync", owning_round_trip),
                       ("managed_tensor_allocator", allocate), ("current_work_stream", stream),
                       ("clear errors", refusals)))


# ---------------------------------------------------------------- the devices torch reports

def device_types() -> List[Tuple[str, str, int]]:
    """(name, torch device type, device count) of each device type torch reports available."""
    found = []
    if torch.cuda.is_available():
        found.append(("ROCm" if torch.version.hip else "CUDA", "cuda", torch.cuda.device_count()))
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found.append(("XPU", "xpu", xpu.device_count()))
    if torch.backends.mps.is_available():
        found.append(("MPS", "mps", 1))
    name = torch._C._get_privateuse1_backend_name()
    module = getattr(torch, name, None) if name != "privateuseone" else None
    if module is not None and module.is_available():
        found.append((f"PrivateUse1 ({name})", name, module.device_count()))
    return found


def torch_export(t: torch.Tensor):
    """What torch's own t.__dlpack__() describes, read by the C probe (the oracle of the export checks)."""
    try:
        capsule = t.__dlpack__(max_version=(1, 3))
    except TypeError as e:  # before torch 2.6 no versioned capsule
        raise NotApplicable(f"this torch's __dlpack__ makes no versioned capsule ({e})") from None
    return _probe.from_capsule(capsule).info()


def stream_handle(stream) -> int:
    """A torch stream's raw handle: cudaStream_t/hipStream_t, the SYCL queue, or what c10 reports."""
    for attribute in ("cuda_stream", "sycl_queue", "native_handle"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    raise NotApplicable(f"torch gives no handle for a {type(stream).__name__}")


def torch_current_stream(device: torch.device) -> int:
    module: Any = getattr(torch, device.type, None)
    try:
        stream = (module.current_stream(device) if hasattr(module, "current_stream")
                  else torch.accelerator.current_stream(device))
    except Exception as e:
        raise NotApplicable(f"torch gives no current stream of {device} ({type(e).__name__}: "
                            f"{first_line(e)})") from None
    if stream.device.type != device.type:  # a backend module that asks torch.accelerator, which is another type
        raise NotApplicable(f"torch's current stream of {device} is a stream of {stream.device}")
    return stream_handle(stream)


def new_stream_context(device: torch.device) -> Tuple[Any, ContextManager]:
    """A stream from torch's pool for `device` (not its default) and the context that makes it current."""
    module: Any = getattr(torch, device.type, None)
    stream = module.Stream(device=device) if hasattr(module, "Stream") else torch.Stream(device=device)
    return stream, module.stream(stream) if hasattr(module, "stream") else stream


def memory_counter(device: torch.device) -> Optional[Callable[[], int]]:
    """Bytes torch's allocator holds for tensors on `device`, where torch counts them."""
    if device.type in ("cuda", "xpu"):
        module = getattr(torch, device.type)
        return lambda: module.memory_allocated(device)
    if device.type == "mps":
        return torch.mps.current_allocated_memory
    try:  # a PrivateUse1 backend: only if its allocator is a c10 DeviceAllocator
        torch.accelerator.memory_allocated(device)
        return lambda: torch.accelerator.memory_allocated(device)
    except Exception:
        return None


def current_device(device: torch.device) -> ContextManager:
    """Makes `device` current where torch's __dlpack__ requires it (CUDA refuses other devices' tensors)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def describe(info) -> str:
    data, (kind, index), _, _, shape, strides, offset = info
    return (f"({DL_NAMES.get(kind, kind)}, {index}), data {data:#x}, shape {shape}, strides {strides}, "
            f"byte_offset {offset}")


def export_differences(ours, theirs) -> List[str]:
    fields = ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")
    return [f"{field}: ours {a}, torch's {b}" for field, a, b in zip(fields, ours, theirs) if a != b]


def sample(device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two views of torch.arange(24) copied to `device`: one with an offset, a step and a transposition (shape
    (3, 3), strides (2, 6), storage offset 6), and the contiguous tail from element 6."""
    source = torch.arange(24, dtype=torch.float32).to(device)
    return source.as_strided((3, 3), (2, 6), 6), source[6:]


def device_checks(api, device: torch.device, pinned: bool = False,
                  tensors: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> List[Result]:
    """The table against torch on one device. `pinned` adds the check of pinned host memory (once per CUDA
    or ROCm machine); `tensors` replaces sample(device) (tests pass stand-ins' tensors, which torch cannot
    view)."""
    expected = torch.arange(24, dtype=torch.float32)
    with current_device(device):
        try:
            view, tail = tensors if tensors is not None else sample(device)
            try:  # the DLPack device (type, id) as torch names it, for the calls that take one
                dl_device = torch_export(view)[1]
            except NotApplicable:
                dl_device = _probe.dltensor(api, view)[1]
        except Exception as e:
            return [("a tensor there", FAIL, f"torch could not make one: {type(e).__name__}: {first_line(e)}")]

        def export() -> str:
            ours, theirs = _probe.dltensor(api, view), torch_export(view)
            differences = export_differences(ours, theirs)
            owning = _probe.export(api, view).info()
            if owning != ours:
                differences.append(f"the owning export says {describe(owning)}")
            note = ""
            if dl_device[0] == kDLMetal and differences == [
                    f"data: ours {ours[0]}, torch's {ours[0] + ours[6]}", f"byte_offset: ours {ours[6]}, torch's 0"]:
                # DLPack's data is an id<MTLBuffer> there, which cannot be offset; torch fixed its exporter in 2026
                note, differences = "; torch's __dlpack__ adds byte_offset to the id<MTLBuffer> handle", []
            assert not differences, "differs from t.__dlpack__(): " + "; ".join(differences)
            return f"{describe(ours)}, as t.__dlpack__(){note}"

        def stream() -> str:
            try:
                outside = torch_current_stream(device)
            except NotApplicable as e:
                raise NotApplicable(f"{e}; this table: {ours_stream(api, dl_device)}") from None
            ours = _probe.current_stream(api, *dl_device)
            assert ours == outside, f"ours {ours:#x}, torch's current stream {outside:#x}"
            side, context = new_stream_context(device)
            with context:
                inside = torch_current_stream(device)
                assert inside == stream_handle(side) != outside, "torch did not make the pool stream current"
                ours_inside = _probe.current_stream(api, *dl_device)
            assert ours_inside == inside, (f"in a stream context: ours {ours_inside:#x}, torch's current stream "
                                           f"{inside:#x}")
            after = _probe.current_stream(api, *dl_device)
            assert after == outside, f"after the stream context: ours {after:#x}, torch's {outside:#x}"
            return f"torch's current stream {outside:#x}, and {inside:#x} inside a stream context"

        def allocation() -> str:
            try:
                torch.empty(0, device=device)
            except Exception as e:
                raise NotApplicable(f"torch cannot allocate on {device} either ({type(e).__name__}: "
                                    f"{first_line(e)})") from None
            count = memory_counter(device)
            elements = 1 << 18
            before = count() if count else 0
            managed = _probe.allocate(api, [elements], FLOAT32, dl_device)
            data, got_device, _, _, shape, strides, _ = managed.info()
            assert (got_device, shape, strides) == (dl_device, (elements,), (1,)), f"got {describe(managed.info())}"
            held = count() if count else 0
            tensor = managed.to_python(api)
            assert tensor.device == view.device and tensor.data_ptr() == data, (
                f"imported as {tensor.device} at {tensor.data_ptr():#x}")
            del managed, tensor
            if count is None:
                return f"1 MiB at {data:#x}, imported as {view.device} (torch counts no memory of {device.type})"
            after = count()
            assert held >= before + 4 * elements and after == before, (
                f"memory_allocated {before} before, {held} while held, {after} after")
            return f"1 MiB from torch's allocator (memory_allocated {before} -> {held} -> {after})"

        def pinned_memory() -> str:
            host = kDLROCMHost if torch.version.hip else kDLCUDAHost
            managed = _probe.allocate(api, [24], FLOAT32, (host, 0))
            assert managed.info()[1] == (host, 0), f"allocated as {describe(managed.info())}"
            tensor = managed.to_python(api)
            assert tensor.device.type == "cpu" and tensor.is_pinned(), f"imported as {tensor.device}, not pinned"
            tensor.copy_(expected)
            travelled = tensor.to(device, non_blocking=True).cpu()
            assert torch.equal(travelled, expected), "values changed on a copy to the device and back"
            ours, theirs = _probe.dltensor(api, tensor)[1], torch_export(tensor)[1]
            assert ours == theirs, f"a pinned tensor exports as {ours}, torch's __dlpack__ says {theirs}"
            said = tuple(int(x) for x in tensor.__dlpack_device__())
            aside = f" (its __dlpack_device__() says {DL_NAMES.get(said[0], said[0])})" if said != ours else ""
            return (f"({DL_NAMES[host]}, 0) allocation is page-locked, values copy to {device} and back; a pinned "
                    f"tensor exports as ({DL_NAMES.get(ours[0], ours[0])}, {ours[1]}), as torch's __dlpack__{aside}")

        def round_trip() -> str:
            back = _probe.export(api, view).to_python(api)
            seen = (back.device, back.data_ptr(), tuple(back.shape), back.stride())
            wanted = (view.device, view.data_ptr(), tuple(view.shape), view.stride())
            assert seen == wanted, f"imported as {seen}, exported {wanted}"
            contiguous = _probe.export(api, tail).to_python(api)
            try:
                values = contiguous.cpu()  # a plain copy: the tensor is contiguous
            except Exception as e:
                return (f"the view imports as itself (values not read: torch cannot copy {device} to the host, "
                        f"{type(e).__name__}: {first_line(e)})")
            assert torch.equal(values, tail.cpu()), "values changed on export -> import"
            return "the view imports as itself; values read back through a host copy"

        checks = [("export of a view", export), ("current_work_stream", stream), ("allocation", allocation)]
        if pinned:
            checks.append(("pinned host memory", pinned_memory))
        checks.append(("import round trip", round_trip))
        return run_checks(checks)


def ours_stream(api, dl_device) -> str:
    try:
        return f"{_probe.current_stream(api, *dl_device):#x}"
    except Exception as e:
        return f"{type(e).__name__}: {first_line(e)}"


def report(api) -> Tuple[List[str], List[str]]:
    """The self-check's lines (CPU, then each device), and the checks that failed (none: every check passed or
    did not apply)."""
    lines: List[str] = []
    failed: List[str] = []

    def add(prefix: str, results: List[Result]) -> None:
        for name, status, detail in results:
            lines.append(f"  [{status}] {prefix}{name}: {detail}")
            if status == FAIL:
                failed.append(prefix + name)

    add("", cpu_checks(api))
    kinds = device_types()
    if not kinds:
        lines.append("  other devices: none (torch reports no CUDA, ROCm, XPU, MPS or PrivateUse1 device)")
    for name, kind, count in kinds:
        checked = min(count, MAX_DEVICES)
        lines.append(f"  {name}: {count} device{'s' if count != 1 else ''}"
                     + (f", the first {checked} checked" if checked < count else ""))
        for index in range(checked):
            device = torch.device(kind, index)
            add(f"{device} ", device_checks(api, device, pinned=index == 0 and kind == "cuda"))
    return lines, failed
