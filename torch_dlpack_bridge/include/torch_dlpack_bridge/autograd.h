/*!
 * \file torch_dlpack_bridge/autograd.h
 * \brief Written parameters and torch's autograd: whether a kernel may write a tensor, decided as torch decides
 *        it for its own in-place operations, and the version-counter bump that makes the write visible to
 *        autograd. Used by tdb::Tensor for every parameter with a non-const element type (tensor.h).
 *
 * torch's rules, and what a written parameter does:
 *  - a tensor that does not require grad: written, as by torch (its version counter is not bumped, see below);
 *  - in grad mode, a tensor that requires grad: refused. A leaf as torch refuses it
 *    ("a leaf Variable that requires grad is being used in an in-place operation"); any other because torch
 *    records its own in-place op in the graph and a kernel's write it cannot record: the gradient would be that
 *    of the values before;
 *  - under torch.no_grad() or torch.inference_mode() (an optimizer's step), a tensor that requires grad: written,
 *    and its version counter bumped as torch's in-place ops bump it (torch.autograd.graph.increment_version), so
 *    a backward that saved the old values raises "modified by an inplace operation" instead of using new ones
 *    (when the argument is taken, before the kernel runs; an overloaded function's two passes may bump it twice,
 *    which torch's documentation of increment_version calls harmless);
 *  - an inference tensor: written. torch refuses its own in-place ops on one outside inference mode, but it has
 *    no version counter and torch refuses to save it for backward, so no gradient can depend on its values.
 *
 * Not seen: a tensor that does not require grad but was saved for backward by an op on another one that does
 * (`x` in `x * w`, `w.requires_grad`). Telling it apart would cost a version bump on every written tensor of
 * every call (a Python call, about 0.2 us); a kernel that writes such a tensor calls
 * `torch.autograd.graph.increment_version(x)` after it, or is registered as a custom op (torch.library,
 * mutates_args), which does it.
 *
 * Cost, per written parameter: for a torch.Tensor or nn.Parameter, a few ns: torch_dlpack_bridge publishes
 * on torch.Tensor a C function (TDB_AUTOGRAD_PROBE_ATTR, dlpack.h) that reads requires_grad as torch's own
 * getter does, found once per type with the exchange table and cached with it (table.h). Where it answers
 * "unknown" (a subclass, or a torch function mode active: torch would call __torch_function__ for the
 * attribute) or the type has none (the package not imported before the type's first use, NumPy arrays and
 * other producers): one attribute read (`requires_grad`, no exception when there is none), about 40 ns for a
 * torch.Tensor, microseconds for a subclass with its own __torch_function__. The rest runs only for tensors
 * that require grad.
 */
#ifndef TORCH_DLPACK_BRIDGE_AUTOGRAD_H_
#define TORCH_DLPACK_BRIDGE_AUTOGRAD_H_

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/table.h"

namespace tdb {
namespace detail {

/*! \brief The refusals, worded as torch words its own (a leaf) and with the way out. */
constexpr const char kWrittenLeafRequiresGrad[] =
    "a leaf Variable that requires grad is being used in an in-place operation (the kernel writes this "
    "parameter): call it under torch.no_grad(), or pass a tensor that does not require grad";
constexpr const char kWrittenTensorRequiresGrad[] =
    "a tensor that requires grad is written by a kernel autograd cannot see (its gradient would be that of "
    "the values before the write): call it under torch.no_grad(), or pass a tensor that does not require grad";
constexpr const char kAutogradUnanswered[] = "could not ask torch's autograd whether this tensor may be written";

/*! \brief "requires_grad", interned once per extension module (nullptr if that failed: out of memory). */
TDB_MODULE_LOCAL inline PyObject* requires_grad_name() noexcept {
  static PyObject* const name = PyUnicode_InternFromString("requires_grad");
  return name;
}

/*! \brief getattr(obj, name) into *result (a new reference), 0 and no exception when there is none; -1 on error. */
inline int optional_attr(PyObject* obj, PyObject* name, PyObject** result) noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, result);
#else
  return _PyObject_LookupAttr(obj, name, result);
#endif
}

/*!
 * \brief autograd_refuses_write() for a tensor that requires grad: torch's grad mode decides (see the file
 * comment). Out of line: a training step's rare path, Python calls of a microsecond.
 */
TDB_NOINLINE inline const char* write_requiring_grad(PyObject* obj) noexcept {
  PyObject* torch = PyImport_ImportModule("torch");  // no torch: another framework's tensor, whose autograd is not ours
  PyObject* tensor_type = torch ? PyObject_GetAttrString(torch, "Tensor") : nullptr;
  const int is_torch = !torch ? 0 : tensor_type ? PyObject_IsInstance(obj, tensor_type) : -1;
  PyObject* grad_mode = is_torch == 1 ? PyObject_CallMethod(torch, "is_grad_enabled", nullptr) : nullptr;
  const char* why = is_torch == 0 ? nullptr : kAutogradUnanswered;
  if (grad_mode == Py_True) {
    PyObject* leaf = PyObject_GetAttrString(obj, "is_leaf");
    why = leaf == Py_True ? kWrittenLeafRequiresGrad : leaf ? kWrittenTensorRequiresGrad : kAutogradUnanswered;
    Py_XDECREF(leaf);
  } else if (grad_mode == Py_False) {  // no_grad: written, and seen by any backward that saved it
    PyObject* graph = PyImport_ImportModule("torch.autograd.graph");
    PyObject* done = graph ? PyObject_CallMethod(graph, "increment_version", "O", obj) : nullptr;
    why = done ? nullptr : kAutogradUnanswered;
    Py_XDECREF(done);
    Py_XDECREF(graph);
  }
  Py_XDECREF(grad_mode);
  Py_XDECREF(tensor_type);
  Py_XDECREF(torch);
  PyErr_Clear();  // the answer is `why`; a failed call above is reported as kAutogradUnanswered
  return why;
}

/*!
 * \brief nullptr when a kernel may write `obj` (borrowed), after bumping its version counter where torch's
 * autograd tracks it; else why not (one of the messages above). Never throws, leaves no Python exception set.
 * A tensor that does not require grad costs a call of its type's probe (see the file comment), or one
 * attribute read.
 */
inline const char* autograd_refuses_write(PyObject* obj) noexcept {
  AutogradProbe probe = nullptr;
  cached_table(table_cache(), Py_TYPE(obj), &probe);  // the view was just taken: its type's table is cached
  if (probe) {
    const int requires_grad = probe(obj);
    if (requires_grad >= 0) return requires_grad ? write_requiring_grad(obj) : nullptr;
  }
  PyObject* name = requires_grad_name();
  PyObject* flag = nullptr;
  if (!name || optional_attr(obj, name, &flag) < 0) {
    PyErr_Clear();
    return kAutogradUnanswered;
  }
  const bool requires_grad = flag == Py_True;
  Py_XDECREF(flag);
  return requires_grad ? write_requiring_grad(obj) : nullptr;
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_AUTOGRAD_H_
