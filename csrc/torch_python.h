// The three things this library takes from libtorch_python, declared here rather than by including
// torch/csrc/autograd/python_variable.h: that header pulls pybind11 into the library, which ties the binary to
// one CPython's private API (pybind11 calls _PyThreadState_UncheckedGet, gone in 3.13) and doubles the build
// time. What is declared here is checked against torch's own header at every build (torch_python_check.cc).
#pragma once

#include <Python.h>
#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>

#include "mapping.h"  // TDB_TORCH_AT_LEAST

#ifndef TDB_TORCH_PYTHON_CHECK  // the check sees torch's own declarations only
// torch.Tensor and torch.nn.Parameter (defined in libtorch_python, global namespace).
extern PyObject* THPVariableClass;
extern PyObject* ParameterClass;

// A new reference to the Python object of a tensor (torch 2.6 switched from a by-value argument).
#if TDB_TORCH_AT_LEAST(2, 6)
PyObject* THPVariable_Wrap(const at::TensorBase& var);
#else
PyObject* THPVariable_Wrap(at::TensorBase var);
#endif
#endif  // TDB_TORCH_PYTHON_CHECK

namespace tdb {

// The head of torch's THPVariable: the tensor follows the object header (torch 2.10 stores it directly; before,
// through a MaybeOwned).
struct PyTensorHead {
  PyObject_HEAD
#if TDB_TORCH_AT_LEAST(2, 10)
  at::Tensor cdata;
#else
  c10::MaybeOwned<at::Tensor> cdata;
#endif
};

// The tensor inside a torch.Tensor object (no refcount change), as torch's own THPVariable_Unpack reads it.
inline const at::Tensor& unpack_tensor(PyObject* obj) noexcept {
#if TDB_TORCH_AT_LEAST(2, 10)
  return reinterpret_cast<PyTensorHead*>(obj)->cdata;
#else
  return *reinterpret_cast<PyTensorHead*>(obj)->cdata;
#endif
}

}  // namespace tdb
