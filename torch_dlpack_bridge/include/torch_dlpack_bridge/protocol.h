/*!
 * \file torch_dlpack_bridge/protocol.h
 * \brief The standard Python protocol (`obj.__dlpack_device__()`, `obj.__dlpack__(...)`), for producers that
 *        publish no exchange table (NumPy, JAX, CuPy, older libraries): exports the object and hands the tensor
 *        out as an owning DLManagedTensorVersioned.
 *
 * Included by managed.h (consumer.h includes it for raw-CPython kernels).
 */
#ifndef TORCH_DLPACK_BRIDGE_PROTOCOL_H_
#define TORCH_DLPACK_BRIDGE_PROTOCOL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/table.h"

namespace tdb {

namespace detail {

/*!
 * \brief What a tensor taken through `__dlpack__` is handed out as: a versioned tensor of our own that owns
 * the producer's (versioned or legacy) tensor. One heap object; its deleter calls the producer's deleter
 * (which takes the GIL itself if it needs it, as DLPack requires) and frees the wrapper, on any thread.
 */
struct ProtocolTensor {
  DLManagedTensorVersioned self{};     // what ManagedTensor holds; self.manager_ctx points back here
  DLManagedTensorVersioned* versioned = nullptr;  // the producer's tensor: exactly one of these two is set
  DLManagedTensor* legacy = nullptr;
  std::vector<int64_t> strides;        // row-major strides, filled only when the producer gave NULL strides

  static void deleter(DLManagedTensorVersioned* self) {
    ProtocolTensor* w = static_cast<ProtocolTensor*>(self->manager_ctx);
    if (w->versioned && w->versioned->deleter) w->versioned->deleter(w->versioned);
    if (w->legacy && w->legacy->deleter) w->legacy->deleter(w->legacy);
    delete w;
  }
};

/*! \brief `obj.__dlpack_device__()` as a DLDevice; (kDLCPU, 0) when the object has no such method. */
inline DLDevice protocol_device(PyObject* obj, const char* name) {
  PyObject* result = PyObject_CallMethod(obj, "__dlpack_device__", nullptr);
  if (!result) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw_pending(name);
    PyErr_Clear();
    return DLDevice{kDLCPU, 0};
  }
  int type = 0, id = 0;
  const bool ok = PyTuple_Check(result) && PyArg_ParseTuple(result, "ii", &type, &id);
  Py_DECREF(result);
  if (!ok) {
    PyErr_Clear();
    throw Error(PyExc_BufferError, arg(name) + "__dlpack_device__() did not return a (device_type, device_id) pair");
  }
  return DLDevice{static_cast<DLDeviceType>(type), id};
}

/*!
 * \brief The `stream` argument for `__dlpack__` on `device`, as a new reference, or NULL for None. The
 * Python spec defines streams for CUDA and ROCm only (CPU and the rest must get None). We ask for the
 * default stream (CUDA: 1, the legacy default stream; ROCm: 0): a consumer without an exchange table
 * has no producer to ask for its current stream, and tdb::current_stream() gives NULL (the default
 * stream) for such tensors, so kernels launched there are ordered after the producer's work.
 */
inline PyObject* protocol_stream(DLDevice device) {
  switch (device.device_type) {
    case kDLCUDA:
    case kDLCUDAManaged: return PyLong_FromLong(1);
    case kDLROCM: return PyLong_FromLong(0);
    default: return nullptr;
  }
}

/*! \brief Calls `method(**kwargs)`; kwargs holds `stream` (if not NULL) and, when `versioned`, max_version and copy. */
inline PyObject* call_dlpack(PyObject* method, PyObject* stream, bool versioned) {
  PyObject* kwargs = PyDict_New();
  PyObject* args = PyTuple_New(0);
  PyObject* result = nullptr;
  bool ok = kwargs && args && (!stream || PyDict_SetItemString(kwargs, "stream", stream) == 0);
  if (ok && versioned) {
    PyObject* max_version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
    // copy=False: a kernel may write through the view, so a silent copy would lose its results.
    ok = max_version && PyDict_SetItemString(kwargs, "max_version", max_version) == 0 &&
         PyDict_SetItemString(kwargs, "copy", Py_False) == 0;
    Py_XDECREF(max_version);
  }
  if (ok) result = PyObject_Call(method, args, kwargs);
  Py_XDECREF(args);
  Py_XDECREF(kwargs);
  return result;
}

/*!
 * \brief True when the pending exception is the TypeError of a producer that does not take the keywords the
 * versioned call adds: CPython's and Cython's "unexpected keyword argument 'max_version'" (or 'copy', for a
 * DLPack 1.0 draft), "takes no keyword arguments", pybind11's and nanobind's lists of the call's keywords. Any
 * other TypeError is the producer's answer, and a second call would only repeat it; where `__dlpack__` calls a
 * kernel with its own object, retrying at every level of that recursion made 2^depth calls (a hang).
 */
inline bool refused_new_keywords() {
  if (!PyErr_ExceptionMatches(PyExc_TypeError)) return false;
  PyObject* exc = fetch_exception();
  PyObject* text = exc ? PyObject_Str(exc) : nullptr;
  const char* s = text ? PyUnicode_AsUTF8(text) : nullptr;
  const bool refused = s && (std::strstr(s, "max_version") || std::strstr(s, "'copy'") ||
                             std::strstr(s, "no keyword arguments"));
  Py_XDECREF(text);
  PyErr_Clear();  // a failed str(): the original exception is the one to report
  restore_exception(exc);
  return refused;
}

/*!
 * \brief Exports `obj` through the standard protocol: `__dlpack_device__()`, then `__dlpack__(stream=...,
 * max_version=(1, 3), copy=False)`, and if the producer does not take those arguments (TypeError), the
 * legacy `__dlpack__(stream=...)`. Takes ownership of the capsule's tensor (renaming the capsule to
 * "used_..." as the spec says) and returns it wrapped as a new ProtocolTensor's `self`: the caller owns it.
 * Throws TypeError (naming `name`) when obj is a class or its type has no `__dlpack__` method, BufferError
 * for an unusable capsule or a tensor of another major version, and the producer's own error otherwise.
 */
inline DLManagedTensorVersioned* export_by_protocol(PyObject* obj, const char* name) {
  if (PyType_Check(obj))
    throw Error(PyExc_TypeError, arg(name) + "expected a tensor, got the class '" +
                                     reinterpret_cast<PyTypeObject*>(obj)->tp_name + "' itself");
  PyObject* method = has_dlpack_method(obj) ? PyObject_GetAttrString(obj, "__dlpack__") : nullptr;
  if (!method) {
    PyErr_Clear();
    std::string why;
    read_table(Py_TYPE(obj), &why);
    throw Error(PyExc_TypeError, arg(name) + "expected a tensor, got '" + Py_TYPE(obj)->tp_name + "' (its type " +
                                     why + ", and no __dlpack__ method)");
  }
  DLDevice device{kDLCPU, 0};
  PyObject* stream = nullptr;
  PyObject* capsule = nullptr;
  try {
    device = protocol_device(obj, name);
    stream = protocol_stream(device);
    if (!stream && PyErr_Occurred()) throw_pending(name);
    capsule = call_dlpack(method, stream, true);
    if (!capsule && refused_new_keywords()) {  // a producer older than max_version/copy
      PyErr_Clear();
      capsule = call_dlpack(method, stream, false);
    }
  } catch (...) {
    Py_DECREF(method);
    Py_XDECREF(stream);
    throw;
  }
  Py_DECREF(method);
  Py_XDECREF(stream);
  if (!capsule) throw_pending(name);

  // Take the tensor out of the capsule; from here on we own it (the renamed capsule will not free it).
  DLManagedTensorVersioned* versioned = nullptr;
  DLManagedTensor* legacy = nullptr;
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    versioned = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    if (versioned) PyCapsule_SetName(capsule, "used_dltensor_versioned");
  } else if (PyCapsule_IsValid(capsule, "dltensor")) {
    legacy = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (legacy) PyCapsule_SetName(capsule, "used_dltensor");
  }
  const std::string what = PyCapsule_CheckExact(capsule) ? "a capsule not named 'dltensor_versioned' or 'dltensor'"
                                                         : std::string("'") + Py_TYPE(capsule)->tp_name + "'";
  Py_DECREF(capsule);
  PyErr_Clear();
  if (!versioned && !legacy)
    throw Error(PyExc_BufferError, arg(name) + "__dlpack__() returned " + what + ", not a DLPack tensor");
  if (versioned && versioned->version.major != DLPACK_MAJOR_VERSION) {
    const uint32_t major = versioned->version.major;
    if (versioned->deleter) versioned->deleter(versioned);  // the only thing DLPack allows us to touch
    throw Error(PyExc_BufferError, arg(name) + "DLPack tensor of major version " + std::to_string(major) +
                                       " is not supported (need " + std::to_string(DLPACK_MAJOR_VERSION) + ")");
  }

  ProtocolTensor* w = nullptr;
  try {
    w = new ProtocolTensor;
    w->versioned = versioned;
    w->legacy = legacy;
    w->self.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    w->self.manager_ctx = w;
    w->self.deleter = &ProtocolTensor::deleter;
    w->self.flags = versioned ? versioned->flags : 0;
    w->self.dl_tensor = versioned ? versioned->dl_tensor : legacy->dl_tensor;
    DLTensor& t = w->self.dl_tensor;
    if (t.ndim > 0 && t.shape && !t.strides) {  // NULL strides meant row-major before DLPack 1.2
      w->strides.resize(t.ndim);
      for (int64_t i = t.ndim - 1, s = 1; i >= 0; s *= t.shape[i], --i) w->strides[i] = s;
      t.strides = w->strides.data();
    }
  } catch (...) {  // out of memory: give the producer's tensor back before reporting
    delete w;
    if (versioned && versioned->deleter) versioned->deleter(versioned);
    if (legacy && legacy->deleter) legacy->deleter(legacy);
    throw;
  }
  return &w->self;
}

}  // namespace detail

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_PROTOCOL_H_
