/*!
 * \file torch_dlpack_bridge/autograd.h
 * \brief Written parameters and torch's autograd: whether a kernel may write a tensor, decided as torch decides
 *        it for its own in-place operations, and the version-counter bump that makes the write visible to
 *        autograd. Used by tdb::Tensor for every parameter with a non-const element type (tensor.h).
 *
 * torch's rules, and what a written parameter does:
 *  - a tensor that does not require grad: written;
 *  - in grad mode, a tensor that requires grad: refused. A leaf as torch refuses it
 *    ("a leaf Variable that requires grad is being used in an in-place operation"); any other because torch
 *    records its own in-place op in the graph and a kernel's write it cannot record: the gradient would be that
 *    of the values before;
 *  - under `torch.no_grad()` or `torch.inference_mode()` (an optimizer's step), a tensor that requires grad:
 *    written;
 *  - an inference tensor: written. torch refuses its own in-place ops on one outside inference mode, but it has
 *    no version counter and torch refuses to save it for backward, so no gradient can depend on its values.
 *
 * Every written tensor's version counter is bumped once, as torch's in-place operations bump it
 * (`torch.autograd.graph.increment_version`), whether or not it requires grad: `.detach()` and views share the
 * counter, so a backward that saved `w` raises "modified by an inplace operation" after a kernel wrote
 * `w.detach()`, as after `w.detach().mul_(5)`. A refused call changes nothing: the binding library asks whether a
 * tensor may be written while it tries overloads, and the counter is bumped only once it has chosen one, when it
 * converts the argument for the body (each element of a `std::optional` or `std::vector` of written tensors
 * then too); in the raw CPython flavour, tdb::Tensor's checking constructor, which the kernel calls, bumps it.
 *
 * Cost, per written parameter: a few instructions inline for a `torch.Tensor` or `nn.Parameter` once
 * torch_dlpack_bridge is imported; otherwise one read of its `requires_grad` attribute, about 40 ns for a
 * `torch.Tensor` and microseconds for a subclass with its own `__torch_function__`, and a call of
 * `torch.autograd.graph.increment_version`. Another framework's tensor (a NumPy array, any object that is no
 * `torch.Tensor`) is written without a question or a bump, and torch is never imported for it. The rest runs
 * only for tensors that require grad.
 */
// How (for maintainers: not in the reference). The decision is detail::autograd_refuses_write, the bump
// detail::commit_write. torch_dlpack_bridge publishes on torch.Tensor where the TensorImpl, its autograd meta and
// its version counter lie in such an object (TDB_AUTOGRAD_LAYOUT_ATTR, checked by the table library on tensors
// of its own), so that no autograd meta means "does not require grad" without a call, and the bump is an atomic
// increment of the counter, as torch's own in-place operations make it: every view of a base shares one counter,
// so threads that write disjoint views of it (no race on the data) bump one counter at once, and only an
// increment neither loses a bump nor takes the counter back. Tensors with autograd meta ask the C function
// TDB_AUTOGRAD_PROBE_ATTR (requires_grad as torch's in-place operations read it, the C++ flag); without the
// layout, TDB_VERSION_BUMP_ATTR bumps. All are found with the exchange table, in the same per-type cache lookup as the
// view's table (table.h), and need no GIL. Where the probe answers "unknown" (a subclass: it may answer through
// its own __torch_function__) or the type has none (the package not imported before the type's first use), the
// attribute is read (no exception when there is none) and torch.autograd.graph.increment_version is called from
// C (taking the GIL if a call guard released it). A torch.Tensor is told from other objects by a real subtype
// check against torch.Tensor once torch is imported (detail::is_torch_tensor).
#ifndef TORCH_DLPACK_BRIDGE_AUTOGRAD_H_
#define TORCH_DLPACK_BRIDGE_AUTOGRAD_H_

#include <atomic>
#include <cstdint>
#include <cstring>

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

/*! \brief "torch", interned once per extension module (nullptr if that failed: out of memory). */
TDB_MODULE_LOCAL inline PyObject* torch_name() noexcept {
  static PyObject* const name = PyUnicode_InternFromString("torch");
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

/*! \brief The pointer-sized field at `base` + `offset` (a layout's, dlpack.h). */
TDB_ALWAYS_INLINE inline char* field_at(const void* base, int64_t offset) noexcept {
  char* value;
  std::memcpy(&value, static_cast<const char*>(base) + offset, sizeof value);
  return value;
}
/*! \brief True when `layout` describes obj: a torch.Tensor or nn.Parameter exactly. */
TDB_ALWAYS_INLINE inline bool described_by(const TDBAutogradLayout& layout, PyObject* obj) noexcept {
  const void* type = Py_TYPE(obj);
  return type == layout.types[0] || type == layout.types[1];
}
/*!
 * \brief False when obj, described by `layout`, has no autograd meta, so does not require grad (the common
 * answer, inline); true when it may (the probe decides) or `layout` does not describe it.
 */
TDB_ALWAYS_INLINE inline bool has_autograd_meta(const TDBAutogradLayout& layout, PyObject* obj) noexcept {
  if (!described_by(layout, obj)) return true;
  return field_at(field_at(obj, layout.impl_offset), layout.autograd_meta_offset) != nullptr;
}
/*!
 * \brief Bumps the version counter of obj, described by `layout`, as the table library's bump does (an atomic
 * increment; nothing for an inference tensor, which has no counter). The TensorImpl and its counter are read at the
 * time of the bump, so whatever happened to obj since the decision is seen.
 */
TDB_ALWAYS_INLINE inline void bump_described(const TDBAutogradLayout& layout, PyObject* obj) noexcept {
  if (char* counter = field_at(field_at(obj, layout.impl_offset), layout.version_counter_offset))
    reinterpret_cast<std::atomic<uint32_t>*>(counter + layout.version_offset)->fetch_add(1, std::memory_order_relaxed);
}
/*! \brief bump_described() when `layout` describes obj (true), else nothing (false). */
TDB_ALWAYS_INLINE inline bool bump_inline(const TDBAutogradLayout& layout, PyObject* obj) noexcept {
  if (!described_by(layout, obj)) return false;
  bump_described(layout, obj);
  return true;
}
/*!
 * \brief The layout this extension module last read from a type's cache entry (table.h), or nullptr. A layout
 * names the types it describes (described_by()), so it answers for an object without the entry of obj's type:
 * a binding caster need not copy that entry per tensor. Set by the paths below that read an entry.
 */
TDB_MODULE_LOCAL inline std::atomic<const TDBAutogradLayout*>& seen_layout() noexcept {
  static std::atomic<const TDBAutogradLayout*> layout{nullptr};
  return layout;
}
/*! \brief The entry's layout if there is one, else seen_layout() (`known`: a type's entry, or nullptr). */
TDB_ALWAYS_INLINE inline const TDBAutogradLayout* layout_of(const AutogradFunctions* known) noexcept {
  return known ? known->layout : seen_layout().load(std::memory_order_acquire);
}
/*!
 * \brief Reads the entry of obj's type into `f` unless `known` is it, and keeps its layout in seen_layout() if it
 * describes obj (a type's layout is only ever used for the types it names, as with the entry).
 */
inline void read_autograd_entry(PyObject* obj, const AutogradFunctions* known, AutogradFunctions* f) noexcept {
  if (known) *f = *known;
  else cached_table(table_cache(), Py_TYPE(obj), f);  // the view was just taken: its type's table is cached
  if (f->layout && described_by(*f->layout, obj)) seen_layout().store(f->layout, std::memory_order_release);
}
/*!
 * \brief The layout to bump obj through when its write is committed: seen_layout() when it describes obj (a
 * torch.Tensor or nn.Parameter exactly), else nullptr (the type's entry then decides). A binding caster takes it
 * with the decision and keeps only it until the conversion (commit_write_through()): an object's memory layout
 * never changes (a `__class__` assignment keeps it), so the bump needs no second type test, and the fields are
 * still read at the bump.
 */
TDB_ALWAYS_INLINE inline const TDBAutogradLayout* seen_layout_describing(PyObject* obj) noexcept {
  const TDBAutogradLayout* layout = layout_of(nullptr);
  return layout && described_by(*layout, obj) ? layout : nullptr;
}

/*!
 * \brief torch.Tensor once torch has been imported (found in sys.modules, never imported here: before torch is
 * imported no object is a torch tensor), else nullptr. Cached once found (its reference kept: torch.Tensor lives
 * as long as the process). Needs the GIL while torch is not found yet.
 */
TDB_MODULE_LOCAL inline PyTypeObject* torch_tensor_type() noexcept {
  static std::atomic<PyTypeObject*> cached{nullptr};
  if (PyTypeObject* type = cached.load(std::memory_order_acquire)) return type;
  PyObject* name = torch_name();
  PyObject* torch = name ? PyImport_GetModule(name) : nullptr;
  PyObject* type = torch ? PyObject_GetAttrString(torch, "Tensor") : nullptr;
  Py_XDECREF(torch);
  if (!type || !PyType_Check(type)) {  // not imported, or still importing
    Py_XDECREF(type);
    PyErr_Clear();
    return nullptr;
  }
  cached.store(reinterpret_cast<PyTypeObject*>(type), std::memory_order_release);
  return reinterpret_cast<PyTypeObject*>(type);
}
/*!
 * \brief True for a torch.Tensor (a subclass too): a real subtype check, which runs no Python code of obj's.
 * False for every other framework's tensor (a NumPy array), whose autograd, if any, is not torch's: a written
 * parameter neither asks it nor bumps anything, and torch is never imported for it.
 */
inline bool is_torch_tensor(PyObject* obj) noexcept {
  PyTypeObject* type = torch_tensor_type();
  return type && PyObject_TypeCheck(obj, type);
}

/*!
 * \brief autograd_refuses_write() for a torch.Tensor that requires grad: torch's grad mode decides (see the file
 * comment). Out of line: a training step's rare path, Python calls of a microsecond.
 */
TDB_NOINLINE inline const char* write_requiring_grad(PyObject* obj) noexcept {
  PyObject* name = torch_name();
  PyObject* torch = name ? PyImport_GetModule(name) : nullptr;  // imported: obj is a torch.Tensor
  PyObject* grad_mode = torch ? PyObject_CallMethod(torch, "is_grad_enabled", nullptr) : nullptr;
  const char* why = grad_mode == Py_False ? nullptr : kAutogradUnanswered;  // no_grad: written
  if (grad_mode == Py_True) {
    PyObject* leaf = PyObject_GetAttrString(obj, "is_leaf");
    why = leaf == Py_True ? kWrittenLeafRequiresGrad : leaf ? kWrittenTensorRequiresGrad : kAutogradUnanswered;
    Py_XDECREF(leaf);
  }
  Py_XDECREF(grad_mode);
  Py_XDECREF(torch);
  PyErr_Clear();  // the answer is `why`; a failed call above is reported as kAutogradUnanswered
  return why;
}

/*! \brief autograd_refuses_write() past the inline answer: the probe, or the attribute read. */
TDB_NOINLINE inline const char* autograd_refuses_write_slow(PyObject* obj, const AutogradFunctions* known) noexcept {
  AutogradFunctions f;
  read_autograd_entry(obj, known, &f);
  if (f.layout && !has_autograd_meta(*f.layout, obj)) return nullptr;  // the common answer, read inline
  if (f.probe) {
    const int requires_grad = f.probe(obj);
    if (requires_grad >= 0) return requires_grad ? write_requiring_grad(obj) : nullptr;
  }
  if (!is_torch_tensor(obj)) return nullptr;  // another framework's tensor: written, nothing asked
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

/*!
 * \brief nullptr when a kernel may write `obj` (borrowed), else why not (one of the messages above). Has no
 * effect (the bump is commit_write's), never throws, leaves no Python exception set. `known`: the type's
 * autograd functions, when the caller looked its table up (else they are looked up here). A torch.Tensor that
 * has no autograd meta is answered inline through the layout; otherwise a call of its type's probe (see the file
 * comment), or one attribute read.
 */
TDB_ALWAYS_INLINE inline const char* autograd_refuses_write(PyObject* obj,
                                                       const AutogradFunctions* known = nullptr) noexcept {
  const TDBAutogradLayout* layout = layout_of(known);
  if (layout && !has_autograd_meta(*layout, obj)) return nullptr;
  return autograd_refuses_write_slow(obj, known);
}

/*!
 * \brief commit_write() where the type has no C bump (a torch.Tensor subclass, torch's own table without this
 * package, other producers): torch.autograd.graph.increment_version(obj) if obj is a torch.Tensor (torch
 * already imported; a real subtype check, no Python code of obj's), nothing otherwise. Takes the GIL if the
 * caller does not hold it (a call guard released it); keeps any exception already set; a failure is not
 * reported (the kernel is chosen), but a KeyboardInterrupt raised meanwhile is raised again at the next check.
 */
TDB_NOINLINE inline void bump_version_in_python(PyObject* obj) noexcept {
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  if (is_torch_tensor(obj)) {
    PyObject* graph = PyImport_ImportModule("torch.autograd.graph");
    PyObject* done = graph ? PyObject_CallMethod(graph, "increment_version", "O", obj) : nullptr;
    Py_XDECREF(done);
    Py_XDECREF(graph);
  }
  if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
  PyGILState_Release(gil);
}

/*! \brief commit_write() past the inline bump: the type's C bump, else bump_version_in_python(). */
TDB_NOINLINE inline void commit_write_slow(PyObject* obj, const AutogradFunctions* known) noexcept {
  AutogradFunctions f;
  read_autograd_entry(obj, known, &f);
  if (f.layout && bump_inline(*f.layout, obj)) return;
  if (f.bump && f.bump(obj) == 0) return;
  bump_version_in_python(obj);
}

/*!
 * \brief commit_write() with the layout seen_layout_describing() gave when the tensor was taken: bumped inline, or,
 * with none, commit_write_slow() (the type's C bump, else Python).
 */
TDB_ALWAYS_INLINE inline void commit_write_through(const TDBAutogradLayout* layout, PyObject* obj) noexcept {
  if (layout) bump_described(*layout, obj);
  else commit_write_slow(obj, nullptr);
}

/*!
 * \brief Bumps the version counter of a written tensor `obj` (borrowed, alive), once per accepted write (see
 * the file comment): inline through the layout for a torch.Tensor or nn.Parameter, else its type's C bump (no GIL
 * needed either way), else bump_version_in_python(). Never throws. `known`: as for autograd_refuses_write().
 */
TDB_ALWAYS_INLINE inline void commit_write(PyObject* obj, const AutogradFunctions* known = nullptr) noexcept {
  const TDBAutogradLayout* layout = layout_of(known);
  if (layout && bump_inline(*layout, obj)) return;
  commit_write_slow(obj, known);
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_AUTOGRAD_H_
