"""What the checker checks: a Target builds one framework's tensors (the corpus), names the views that must be
refused, and says which devices it has. Built-in targets: `torch` (this project's table), `torch-native`
(torch.Tensor's own table, this package kept out), `torch-c-dlpack-ext` (the table the torch-c-dlpack-ext
package publishes), `paddle`, `cuda.core` (StridedMemoryView of NumPy arrays); `module:function` (or
`path/to/file.py:function`) names a function returning a Target, or a tensor factory (Factory).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import inspect
import os
import warnings
from typing import Any, Dict, List, Tuple

Case = Tuple[str, Any]  # (label, tensor)

SAMPLE_SIZE = 4096  # float32s: 16 KiB, small enough for malloc to hand a freed block out again at once


class Target:
    """One framework's tensors. Subclasses fill in the methods; every object they return has the same type,
    the type that publishes the table."""

    name = "target"
    #: environment for the process that runs the cases (e.g. keeping an autoload hook out)
    env: Dict[str, str] = {}

    def setup(self) -> Dict[str, str]:
        """Imports the framework and publishes its table; returns {package: version} for the report."""
        raise NotImplementedError

    def corpus(self) -> List[Case]:
        """Tensors of every dtype the framework has and of every layout it can make (0-d, empty, size-1 dims,
        non-contiguous, offset, negative strides, read-only): each export must agree with `__dlpack__()`."""
        raise NotImplementedError

    def undescribable(self) -> List[Tuple[str, Any, str]]:
        """(label, tensor, why) of views DLPack cannot describe: both exports must refuse them (BufferError)."""
        return []

    def sample(self, value: float) -> Any:
        """A fresh 1-d float32 CPU tensor of SAMPLE_SIZE elements, each `value`."""
        raise NotImplementedError

    def devices(self) -> List[Tuple[int, int]]:
        """(DLPack device type, id) of each device this framework has here; CPU first."""
        return [(1, 0)]

    def table_type(self) -> type:
        return type(self.sample(0.0))

    def owner(self, tensor: Any) -> Any:
        """The object whose lifetime shows what an export keeps alive (the tensor itself, by default)."""
        return tensor


class Torch(Target):
    """torch tensors, with the table published by `publisher`: "bridge" (this package), "native" (torch's
    own; this package's autoload hook kept out) or a module imported to publish it."""

    def __init__(self, publisher: str = "bridge"):
        self.publisher = publisher
        self.name = {"bridge": "torch", "native": "torch-native"}.get(publisher, publisher.replace("_", "-"))
        self.env = {} if publisher == "bridge" else {"TORCH_DLPACK_BRIDGE_AUTOLOAD": "0"}

    def setup(self) -> Dict[str, str]:
        import torch

        versions = {"torch": torch.__version__}
        if self.publisher == "bridge":
            import torch_dlpack_bridge

            torch_dlpack_bridge.install()
            versions["torch_dlpack_bridge"] = torch_dlpack_bridge.__version__
        elif self.publisher != "native":
            module = importlib.import_module(self.publisher)
            versions[self.publisher] = _distribution_version(self.publisher.replace("_", "-"), module)
        return versions

    def dtypes(self) -> List[Any]:
        import torch

        return sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)

    def corpus(self) -> List[Case]:
        import torch

        out: List[Case] = []
        shells = {f"torch.{kind}{bits}" for kind in ("uint", "int") for bits in range(1, 8)}  # in undescribable()
        for dtype in self.dtypes():
            if str(dtype) in shells:
                continue
            try:
                with warnings.catch_warnings():  # "ComplexHalf support is experimental", quantized deprecation
                    warnings.simplefilter("ignore")
                    out.append((f"{str(dtype)[6:]} (3, 4)", torch.zeros(3, 4, dtype=torch.uint8).view(dtype)
                                if dtype.itemsize == 1 else torch.empty(3, 4, dtype=dtype).zero_()))
            except Exception:  # noqa: BLE001: a dtype this torch cannot make a plain tensor of
                continue
        base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
        out += [("0-d", torch.tensor(3.0)), ("empty (0, 3)", torch.empty(0, 3)),
                ("empty transposed (3, 0).T", torch.empty(3, 0).t()), ("size-1 dims (1, 4, 1)", torch.ones(1, 4, 1)),
                ("transposed", base.transpose(0, 2)), ("offset view [1:, 2:, 1:]", base[1:, 2:, 1:]),
                ("step view [:, ::2, ::3]", base[:, ::2, ::3]), ("broadcast (stride 0)", torch.ones(1, 5).expand(4, 5)),
                ("channels_last", torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)),
                ("flat offset [7:20]", base.view(-1)[7:20]),
                ("complex128 offset view", torch.zeros(4, 4, dtype=torch.complex128)[1:, 1:]),
                ("bfloat16 transposed", torch.zeros(3, 4, dtype=torch.bfloat16).t())]
        return out

    def undescribable(self) -> List[Tuple[str, Any, str]]:
        import torch

        out = [("conj view", torch.ones(3, dtype=torch.complex64).conj(), "the conjugate bit is not in DLPack"),
               ("neg view", torch._neg_view(torch.ones(3)), "the negative bit is not in DLPack"),
               ("sparse COO", torch.eye(3).to_sparse(), "not strided"),
               ("meta device", torch.empty(3, device="meta"), "no memory")]
        for bits in range(1, 8):  # torch's shells for sub-byte integers: no packing is defined for them
            for kind in ("uint", "int"):
                dtype = getattr(torch, f"{kind}{bits}", None)
                if dtype is not None:
                    out.append((f"{kind}{bits}", torch.zeros(4, dtype=torch.uint8).view(dtype),
                                f"torch.{kind}{bits} has no defined layout; a whole-byte label misreads it"))
        return out

    def sample(self, value: float) -> Any:
        import torch

        return torch.full((SAMPLE_SIZE,), value, dtype=torch.float32)

    def table_type(self) -> type:
        import torch

        return torch.Tensor


class Paddle(Target):
    name = "paddle"

    def setup(self) -> Dict[str, str]:
        import paddle

        paddle.set_device("cpu")
        return {"paddle": paddle.__version__}

    def corpus(self) -> List[Case]:
        import paddle

        out: List[Case] = []
        for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
                     "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"):
            try:
                out.append((f"{name} (3, 4)", paddle.zeros([3, 4], dtype="float32").astype(name)))
            except Exception:  # noqa: BLE001: a dtype this paddle lacks
                continue
        base = paddle.arange(60, dtype="float32").reshape([3, 4, 5])
        out += [("0-d", paddle.to_tensor(3.0)), ("empty (0, 3)", paddle.zeros([0, 3])),
                ("size-1 dims (1, 4, 1)", paddle.ones([1, 4, 1])), ("transposed", base.transpose([2, 1, 0])),
                ("offset view [1:, 2:, 1:]", base[1:, 2:, 1:]), ("step view [:, ::2, ::3]", base[:, ::2, ::3]),
                ("broadcast", paddle.ones([1, 5]).expand([4, 5]))]
        return out

    def undescribable(self) -> List[Tuple[str, Any, str]]:
        import paddle

        index = paddle.to_tensor([[0, 1], [1, 0]], dtype="int64")
        return [("sparse COO", paddle.sparse.sparse_coo_tensor(index, paddle.to_tensor([1.0, 2.0]), [2, 2]),
                 "not strided"),
                ("sparse CSR", paddle.sparse.sparse_csr_tensor([0, 1, 2], [1, 0], [1.0, 2.0], [2, 2]), "not strided")]

    def sample(self, value: float) -> Any:
        import paddle

        return paddle.full([SAMPLE_SIZE], value, dtype="float32")


class CudaCore(Target):
    """cuda.core's StridedMemoryView of NumPy arrays (host memory: runs without a GPU)."""

    name = "cuda.core"

    def setup(self) -> Dict[str, str]:
        import cuda.core
        import numpy

        return {"cuda.core": cuda.core.__version__, "numpy": numpy.__version__}

    def view(self, array: Any) -> Any:
        from cuda.core.utils import StridedMemoryView

        return StridedMemoryView.from_dlpack(array, stream_ptr=-1)

    def corpus(self) -> List[Case]:
        import numpy as np

        out: List[Case] = []
        for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                     "float32", "float64", "complex64", "complex128"):
            out.append((f"{name} (3, 4)", np.zeros((3, 4), dtype=name)))
        base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
        read_only = np.arange(6, dtype=np.float32)
        read_only.setflags(write=False)
        out += [("0-d", np.array(3.0, dtype=np.float32)), ("empty (0, 3)", np.zeros((0, 3), np.float32)),
                ("size-1 dims (1, 4, 1)", np.ones((1, 4, 1), np.float32)), ("transposed", base.transpose(2, 1, 0)),
                ("offset view [1:, 2:, 1:]", base[1:, 2:, 1:]), ("step view [:, ::2, ::3]", base[:, ::2, ::3]),
                ("negative strides [::-1, :, ::-2]", base[::-1, :, ::-2]), ("read-only", read_only),
                ("broadcast (stride 0, read-only)", np.broadcast_to(np.ones(5, np.float32), (4, 5)))]
        out.append(("bfloat16 (3, 4) from a DLPack capsule", CapsuleProducer((4, 16, 1), (3, 4))))
        views = []
        for label, array in out:
            try:
                views.append((label, self.view(array)))
            except Exception:  # noqa: BLE001: a dtype the view does not take
                continue
        return views

    def sample(self, value: float) -> Any:
        import numpy as np

        return self.view(np.full(SAMPLE_SIZE, value, dtype=np.float32))

    def owner(self, tensor: Any) -> Any:
        return tensor.exporting_obj  # the NumPy array (a view takes no weak references)


class Factory(Target):
    """A target made from a tensor factory `make(dtype: str, shape: tuple) -> tensor` (a CPU tensor, contents
    unspecified): the corpus is every dtype name the factory takes, in a few shapes (0-d, empty, size-1 dims);
    views and undescribable tensors need a Target of their own."""

    DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
              "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2")
    SHAPES = ((3, 4), (), (0, 3), (1, 4, 1))

    def __init__(self, make):
        self.make = make

    def setup(self) -> Dict[str, str]:
        package = type(self.make("float32", (1,))).__module__.split(".")[0]  # the framework, for its version
        return {package: _distribution_version(package, importlib.import_module(package))}

    def corpus(self) -> List[Case]:
        out: List[Case] = []
        for dtype in self.DTYPES:
            for shape in self.SHAPES:
                try:
                    out.append((f"{dtype} {shape}", self.make(dtype, shape)))
                except Exception:  # noqa: BLE001: a dtype the framework lacks
                    break
        return out

    def sample(self, value: float) -> Any:
        return self.make("float32", (SAMPLE_SIZE,))  # (`value` is not written: a factory only allocates)


class CapsuleProducer:
    """A minimal `__dlpack__` producer of CPU memory with any DLPack dtype (made by the checker itself), for a
    dtype the framework can hold but not make (cuda.core's bfloat16 without ml_dtypes)."""

    def __init__(self, dtype, shape):
        from . import _abi

        n = 1
        for size in shape:
            n *= size
        self.buffer = (ctypes.c_uint8 * (n * dtype[1] // 8))()
        strides, step = [], 1
        for size in reversed(shape):
            strides.insert(0, step)
            step *= size
        self.address, _ = _abi.own_tensor(ctypes.addressof(self.buffer), dtype, shape, strides, keep=self.buffer)

    def __dlpack__(self, **_):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(self.address, b"dltensor_versioned", None)  # no destructor: the checker keeps the struct

    def __dlpack_device__(self):
        return (1, 0)


def _distribution_version(distribution: str, module: Any) -> str:
    try:
        from importlib.metadata import version

        return version(distribution)
    except Exception:  # noqa: BLE001
        return str(getattr(module, "__version__", "?"))


BUILT_IN = {"torch": lambda: Torch("bridge"), "torch-native": lambda: Torch("native"),
            "torch-c-dlpack-ext": lambda: Torch("torch_c_dlpack_ext"), "paddle": Paddle, "cuda.core": CudaCore}


def resolve(spec: str) -> Target:
    """A built-in target by name, or `module:function` / `path/to/file.py:function`: a function of no arguments
    returning a Target, or a tensor factory `function(dtype, shape)` (see Factory)."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]()
    if ":" not in spec:
        raise ValueError(f"unknown target {spec!r}: one of {', '.join(BUILT_IN)}, or module:function")
    module_name, function = spec.rsplit(":", 1)
    if module_name.endswith(".py"):
        loaded = importlib.util.spec_from_file_location(os.path.basename(module_name)[:-3], module_name)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = getattr(module, function)
    try:
        takes_arguments = len(inspect.signature(factory).parameters) >= 2
    except (TypeError, ValueError):  # a builtin without a signature: a Target factory, then
        takes_arguments = False
    target = Factory(factory) if takes_arguments else factory()
    if not all(callable(getattr(target, m, None)) for m in ("setup", "corpus", "sample")):  # duck-typed: the
        raise TypeError(f"{spec} returned {type(target).__name__}, not a Target")  # package may load by path
    if getattr(target, "name", "target") == "target":
        target.name = spec
    return target
