"""Static types for the tensors that kernels built with this project's binding headers take.

The pybind11 and nanobind casters (``torch_dlpack_bridge/pybind11.h``, ``nanobind.h``) name a tensor
parameter :class:`DLPackTensor` in signatures, so the stubs that pybind11-stubgen and
``python -m nanobind.stubgen`` write are valid and a type checker accepts what a Python caller passes: a
``torch.Tensor``, a ``numpy.ndarray``, or any other object with ``__dlpack__``. A typed parameter
(``tdb::Tensor<float, tdb::ndim<1>>``) is ``typing.Annotated[DLPackTensorOf[typing.Literal['float32']],
dict(dtype='float32', shape=(None,), writable=True)]``: the constraints are in the metadata, which type checkers show
but do not check; the dtype is in the type as well (:class:`DLPackTensorOf`), so that overloads on dtype alone
(``Tensor<float>`` / ``Tensor<double>``) are distinct to a type checker. ``writable=True`` is a parameter the kernel
writes: it refuses read-only arrays and expanded (overlapping) views; ``writable=False`` (``const float``) takes
them. A returned tensor is ``typing.Any``: it is the producer's own tensor type (``torch.Tensor`` for a torch input), known only at run time.

>>> import torch
>>> from torch_dlpack_bridge.typing import DLPackTensor
>>> isinstance(torch.ones(2), DLPackTensor)
True
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["DLPackTensor", "DLPackTensorOf"]

DType = TypeVar("DType", covariant=True)


@runtime_checkable
class DLPackTensor(Protocol):
    """An object that DLPack's Python protocol can export: what a tensor parameter accepts.

    Tensors whose type publishes DLPack's C exchange table (``torch.Tensor`` with this package) are taken
    through the table; the others through ``__dlpack__``. Both have these two methods.
    """

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


@runtime_checkable
class DLPackTensorOf(DLPackTensor, Protocol[DType]):
    """A :class:`DLPackTensor` parameter of one dtype, named by ``DType`` (``typing.Literal['float32']``).

    Every DLPack tensor matches it whatever ``DType`` is (the casters check the dtype at run time); it only makes
    ``DLPackTensorOf[Literal['float32']]`` and ``DLPackTensorOf[Literal['float64']]`` two types, so that a type
    checker accepts overloads that differ in dtype alone and picks the first that matches.
    """
