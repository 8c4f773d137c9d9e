// Compiled (syntax only, never linked) at every build of the table library: proves that torch_python.h
// declares what this torch's own python_variable.h declares, so a torch that changes them fails the build
// instead of crashing at run time. The .cc suffix keeps it out of the library's sources.
#include <torch/csrc/autograd/python_variable.h>

#include <cstddef>
#include <type_traits>

#define TDB_TORCH_PYTHON_CHECK
#include "torch_python.h"

#pragma GCC diagnostic ignored "-Winvalid-offsetof"  // THPVariable is not standard-layout; its head is

static_assert(offsetof(THPVariable, cdata) == offsetof(tdb::PyTensorHead, cdata),
              "THPVariable's tensor moved: update tdb::PyTensorHead");
static_assert(std::is_same_v<decltype(THPVariable::cdata), decltype(tdb::PyTensorHead::cdata)>,
              "THPVariable's tensor changed type: update tdb::PyTensorHead");
static_assert(std::is_same_v<decltype(THPVariableClass), PyObject*> &&
              std::is_same_v<decltype(ParameterClass), PyObject*>);
// torch must declare the overload torch_python.h declares (only torch's declarations are visible here).
#if TDB_TORCH_AT_LEAST(2, 6)
[[maybe_unused]] static PyObject* (*const wrap_check)(const at::TensorBase&) = &THPVariable_Wrap;
#else
[[maybe_unused]] static PyObject* (*const wrap_check)(at::TensorBase) = &THPVariable_Wrap;
#endif
