// torch_dlpack_bridge._probe: a consumer of any DLPackExchangeAPI, written against the DLPack header and
// Python.h only (no torch), calling the table exactly as a C consumer does. The self-check, the quick
// benchmark and the tests use it, so they can point it at this project's table or at torch's own.
// Written against CPython's limited API (3.9; setup.py defines Py_LIMITED_API), so one build serves every
// CPython with a GIL the wheel covers; a free-threaded CPython has no limited API and gets a build of its own,
// declared to run without the GIL.
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "torch_dlpack_bridge/dlpack.h"

namespace {

std::atomic<Py_ssize_t> g_deleter_calls{0};  // deleters run through counting trampolines, on any thread

// Accepts the table as a capsule (DLPack 1.3) or as an int address (DLPack 1.2).
const DLPackExchangeAPI* parse_api(PyObject* obj) {
  void* p = PyCapsule_CheckExact(obj) ? PyCapsule_GetPointer(obj, TDB_EXCHANGE_API_CAPSULE_NAME)
                                      : PyLong_AsVoidPtr(obj);
  if (p == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "NULL exchange table");
    return nullptr;
  }
  auto* api = static_cast<const DLPackExchangeAPI*>(p);
  if (api->header.version.major != DLPACK_MAJOR_VERSION) {
    PyErr_Format(PyExc_ValueError, "exchange table has major version %u", api->header.version.major);
    return nullptr;
  }
  return api;
}

PyObject* int_tuple(const int64_t* values, int32_t n) {
  PyObject* t = PyTuple_New(values == nullptr ? 0 : n);
  for (int32_t i = 0; t != nullptr && values != nullptr && i < n; ++i) {
    PyTuple_SetItem(t, i, PyLong_FromLongLong(values[i]));
  }
  return t;
}

// (data, (device_type, device_id), ndim, (code, bits, lanes), shape, strides, byte_offset); shape and
// strides are None when NULL.
PyObject* describe(const DLTensor& t) {
  PyObject* shape = t.shape ? int_tuple(t.shape, t.ndim) : (Py_INCREF(Py_None), Py_None);
  PyObject* strides = t.strides ? int_tuple(t.strides, t.ndim) : (Py_INCREF(Py_None), Py_None);
  return Py_BuildValue("(N(ii)i(iii)NNK)", PyLong_FromVoidPtr(t.data), int(t.device.device_type), t.device.device_id,
                       t.ndim, t.dtype.code, t.dtype.bits, t.dtype.lanes, shape, strides,
                       (unsigned long long)t.byte_offset);
}

// ---- Managed: owns one DLManagedTensorVersioned and calls its deleter exactly once ----

struct Managed {
  PyObject_HEAD DLManagedTensorVersioned* tensor;
};

void release(Managed* self) {
  DLManagedTensorVersioned* m = self->tensor;
  self->tensor = nullptr;
  if (m != nullptr && m->deleter != nullptr) m->deleter(m);
}

void managed_dealloc(PyObject* self) {
  release(reinterpret_cast<Managed*>(self));
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free))(self);
  Py_DECREF(type);  // instances of a heap type own a reference to it
}

DLManagedTensorVersioned* owned(PyObject* self) {
  auto* m = reinterpret_cast<Managed*>(self)->tensor;
  if (m == nullptr) PyErr_SetString(PyExc_ValueError, "this Managed tensor was already deleted or handed on");
  return m;
}

PyObject* managed_info(PyObject* self, PyObject*) {
  DLManagedTensorVersioned* m = owned(self);
  return m ? describe(m->dl_tensor) : nullptr;
}

PyObject* managed_version(PyObject* self, PyObject*) {
  DLManagedTensorVersioned* m = owned(self);
  return m ? Py_BuildValue("(II)", m->version.major, m->version.minor) : nullptr;
}

PyObject* managed_flags(PyObject* self, PyObject*) {
  DLManagedTensorVersioned* m = owned(self);
  return m ? PyLong_FromUnsignedLongLong(m->flags) : nullptr;
}

PyObject* managed_delete(PyObject* self, PyObject*) {
  if (owned(self) == nullptr) return nullptr;
  release(reinterpret_cast<Managed*>(self));
  Py_RETURN_NONE;
}

// Hands ownership to api->managed_tensor_to_py_object_no_sync, success or not.
PyObject* managed_to_python(PyObject* self, PyObject* api_obj) {
  const DLPackExchangeAPI* api = parse_api(api_obj);
  DLManagedTensorVersioned* m = api ? owned(self) : nullptr;
  if (m == nullptr) return nullptr;
  reinterpret_cast<Managed*>(self)->tensor = nullptr;
  void* out = nullptr;
  if (api->managed_tensor_to_py_object_no_sync(m, &out) != 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "import failed without a Python exception");
    return nullptr;
  }
  return static_cast<PyObject*>(out);
}

// Counting trampoline: puts the producer's deleter and context back, counts, then calls the producer.
struct Trampoline {
  void (*deleter)(DLManagedTensorVersioned*);
  void* manager_ctx;
};

void counting_deleter(DLManagedTensorVersioned* m) {
  auto* tramp = static_cast<Trampoline*>(m->manager_ctx);
  m->deleter = tramp->deleter;
  m->manager_ctx = tramp->manager_ctx;
  std::free(tramp);
  g_deleter_calls.fetch_add(1, std::memory_order_relaxed);
  if (m->deleter != nullptr) m->deleter(m);
}

PyObject* managed_count_deletes(PyObject* self, PyObject*) {
  DLManagedTensorVersioned* m = owned(self);
  if (m == nullptr) return nullptr;
  auto* tramp = static_cast<Trampoline*>(std::malloc(sizeof(Trampoline)));
  if (tramp == nullptr) return PyErr_NoMemory();
  *tramp = {m->deleter, m->manager_ctx};
  m->deleter = counting_deleter;
  m->manager_ctx = tramp;
  Py_RETURN_NONE;
}

// Calls the deleter on a new native thread that never holds the GIL (as a consumer's worker thread would).
PyObject* managed_delete_on_native_thread(PyObject* self, PyObject*) {
  DLManagedTensorVersioned* m = owned(self);
  if (m == nullptr) return nullptr;
  reinterpret_cast<Managed*>(self)->tensor = nullptr;
  Py_BEGIN_ALLOW_THREADS
  std::thread([m] {
    if (m->deleter != nullptr) m->deleter(m);
  }).join();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// Tensors kept for a C atexit handler, which runs after the interpreter has been finalized.
std::vector<DLManagedTensorVersioned*>* g_kept_until_exit = nullptr;

void delete_kept_tensors() {
  for (DLManagedTensorVersioned* m : *g_kept_until_exit) {
    if (m->deleter != nullptr) m->deleter(m);
  }
  std::fprintf(stderr, "probe: deleted %zu tensors after finalization\n", g_kept_until_exit->size());
}

PyObject* managed_keep_until_exit(PyObject* self, PyObject*) {
  DLManagedTensorVersioned* m = owned(self);
  if (m == nullptr) return nullptr;
  if (g_kept_until_exit == nullptr) {
    g_kept_until_exit = new std::vector<DLManagedTensorVersioned*>();
    std::atexit(delete_kept_tensors);
  }
  g_kept_until_exit->push_back(m);
  reinterpret_cast<Managed*>(self)->tensor = nullptr;
  Py_RETURN_NONE;
}

PyMethodDef managed_methods[] = {
    {"delete_on_native_thread", managed_delete_on_native_thread, METH_NOARGS,
     "Call the deleter from a native thread without the GIL."},
    {"keep_until_exit", managed_keep_until_exit, METH_NOARGS,
     "Call the deleter from a C atexit handler, after interpreter finalization."},
    {"info", managed_info, METH_NOARGS, "The DLTensor as a tuple."},
    {"version", managed_version, METH_NOARGS, "(major, minor)."},
    {"flags", managed_flags, METH_NOARGS, "The flags bitmask."},
    {"delete", managed_delete, METH_NOARGS, "Call the deleter now."},
    {"to_python", managed_to_python, METH_O, "Import through a table's managed_tensor_to_py_object_no_sync."},
    {"count_deletes", managed_count_deletes, METH_NOARGS, "Count the producer's deleter in deleter_calls()."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject* ManagedType = nullptr;  // a heap type, made at module init

PyObject* wrap_managed(DLManagedTensorVersioned* m) {
  auto* self = PyObject_New(Managed, ManagedType);
  if (self == nullptr) {
    if (m->deleter) m->deleter(m);
    return nullptr;
  }
  self->tensor = m;
  return reinterpret_cast<PyObject*>(self);
}

// ---- module functions ----

PyObject* probe_dltensor(PyObject*, PyObject* args) {
  PyObject *api_obj, *obj;
  if (!PyArg_ParseTuple(args, "OO", &api_obj, &obj)) return nullptr;
  const DLPackExchangeAPI* api = parse_api(api_obj);
  if (api == nullptr) return nullptr;
  DLTensor t;
  if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return nullptr;
  return describe(t);
}

PyObject* probe_export(PyObject*, PyObject* args) {
  PyObject *api_obj, *obj;
  if (!PyArg_ParseTuple(args, "OO", &api_obj, &obj)) return nullptr;
  const DLPackExchangeAPI* api = parse_api(api_obj);
  if (api == nullptr) return nullptr;
  DLManagedTensorVersioned* m = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return nullptr;
  return wrap_managed(m);
}

struct ErrorRecord {
  int calls = 0;
  char kind[64] = {0};
  char message[512] = {0};
};

void record_error(void* ctx, const char* kind, const char* message) {
  auto* r = static_cast<ErrorRecord*>(ctx);
  ++r->calls;
  std::snprintf(r->kind, sizeof r->kind, "%s", kind ? kind : "(null)");
  std::snprintf(r->message, sizeof r->message, "%s", message ? message : "(null)");
}

bool parse_shape(PyObject* seq, std::vector<int64_t>& out) {
  const Py_ssize_t n = PySequence_Size(seq);
  if (n < 0) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_GetItem(seq, i);
    if (item == nullptr) return false;
    out.push_back(PyLong_AsLongLong(item));
    Py_DECREF(item);
  }
  return !PyErr_Occurred();
}

// allocate(api, shape, (code, bits, lanes), (device_type, device_id)) -> Managed. On failure raises the
// builtin exception SetError named, after checking SetError ran exactly once.
PyObject* probe_allocate(PyObject*, PyObject* args) {
  PyObject *api_obj, *shape_obj;
  int code, bits, lanes, device_type, device_id;
  if (!PyArg_ParseTuple(args, "OO(iii)(ii)", &api_obj, &shape_obj, &code, &bits, &lanes, &device_type, &device_id)) {
    return nullptr;
  }
  const DLPackExchangeAPI* api = parse_api(api_obj);
  std::vector<int64_t> shape;
  if (api == nullptr || !parse_shape(shape_obj, shape)) return nullptr;
  DLTensor proto{};
  proto.ndim = static_cast<int32_t>(shape.size());
  proto.shape = shape.data();
  proto.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
  proto.device = {static_cast<DLDeviceType>(device_type), device_id};
  ErrorRecord error;
  DLManagedTensorVersioned* m = nullptr;
  const int status = api->managed_tensor_allocator(&proto, &m, &error, record_error);
  if (status == 0 && error.calls == 0 && m != nullptr) return wrap_managed(m);
  if (status != 0 && error.calls == 1) {
    PyObject* kind = PyDict_GetItemString(PyEval_GetBuiltins(), error.kind);
    if (kind == nullptr || !PyExceptionClass_Check(kind)) kind = PyExc_RuntimeError;
    PyErr_SetString(kind, error.message);
    return nullptr;
  }
  if (m != nullptr && m->deleter) m->deleter(m);
  return PyErr_Format(PyExc_SystemError, "allocator broke its contract: returned %d with %d SetError calls", status,
                      error.calls);
}

PyObject* probe_current_stream(PyObject*, PyObject* args) {
  PyObject* api_obj;
  int device_type, device_id;
  if (!PyArg_ParseTuple(args, "Oii", &api_obj, &device_type, &device_id)) return nullptr;
  const DLPackExchangeAPI* api = parse_api(api_obj);
  if (api == nullptr) return nullptr;
  void* stream = reinterpret_cast<void*>(0x1);  // must be overwritten
  if (api->current_work_stream(static_cast<DLDeviceType>(device_type), device_id, &stream) != 0) return nullptr;
  return PyLong_FromVoidPtr(stream);
}

// from_capsule(capsule) -> Managed: consumes a "dltensor_versioned" capsule from __dlpack__(max_version=...).
PyObject* probe_from_capsule(PyObject*, PyObject* capsule) {
  auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
  if (m == nullptr) return nullptr;
  if (PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0) return nullptr;
  return wrap_managed(m);
}

// A probe-made tensor (possibly malformed on purpose) whose deleter counts and frees; `owner` stays
// alive until then (it provides the memory behind `data`).
struct Made {
  DLManagedTensorVersioned managed;
  PyObject* owner;
  int64_t dims[2 * 64];
};

void made_deleter(DLManagedTensorVersioned* m) {
  auto* made = reinterpret_cast<Made*>(m);
  g_deleter_calls.fetch_add(1, std::memory_order_relaxed);
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(made->owner);
    PyGILState_Release(gil);
  }
  delete made;
}

// make(data, (device_type, device_id), (code, bits, lanes), shape|None, strides|None, byte_offset=0,
//      version=(1, 3), flags=0, ndim=len(shape), owner=None, deleter=True) -> Managed
PyObject* probe_make(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"data",    "device", "dtype", "shape", "strides", "byte_offset",
                                "version", "flags",  "ndim",  "owner", "deleter", nullptr};
  unsigned long long data = 0, byte_offset = 0, flags = 0;
  int device_type, device_id, code, bits, lanes, ndim = -1, with_deleter = 1;
  unsigned major = DLPACK_MAJOR_VERSION, minor = DLPACK_MINOR_VERSION;
  PyObject *shape_obj, *strides_obj, *owner = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K(ii)(iii)OO|K(II)KiOp", const_cast<char**>(names), &data,
                                   &device_type, &device_id, &code, &bits, &lanes, &shape_obj, &strides_obj,
                                   &byte_offset, &major, &minor, &flags, &ndim, &owner, &with_deleter)) {
    return nullptr;
  }
  std::vector<int64_t> shape, strides;
  if (shape_obj != Py_None && !parse_shape(shape_obj, shape)) return nullptr;
  if (strides_obj != Py_None && !parse_shape(strides_obj, strides)) return nullptr;
  if (shape.size() > 64 || strides.size() > 64) return PyErr_Format(PyExc_ValueError, "at most 64 dims");
  auto* made = new Made{};
  DLManagedTensorVersioned& m = made->managed;
  m.version = {major, minor};
  m.deleter = with_deleter ? made_deleter : nullptr;
  m.manager_ctx = made;
  m.flags = flags;
  Py_INCREF(owner);
  made->owner = owner;
  DLTensor& t = m.dl_tensor;
  t.data = reinterpret_cast<void*>(data);
  t.device = {static_cast<DLDeviceType>(device_type), device_id};
  t.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
  t.ndim = ndim >= 0 ? ndim : static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), made->dims);
  std::copy(strides.begin(), strides.end(), made->dims + 64);
  t.shape = shape_obj == Py_None ? nullptr : made->dims;
  t.strides = strides_obj == Py_None ? nullptr : made->dims + 64;
  t.byte_offset = byte_offset;
  return wrap_managed(&m);
}

PyObject* probe_deleter_calls(PyObject*, PyObject*) { return PyLong_FromSsize_t(g_deleter_calls.load()); }

// read(address, nbytes) -> bytes: host memory behind an exported pointer.
PyObject* probe_read(PyObject*, PyObject* args) {
  unsigned long long address;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "Kn", &address, &n)) return nullptr;
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(address), n);
}

// ---- timing: ns per call from native code, GIL held, median of `repeats` runs of `iters` calls ----

// `prepare` runs before each timed run, outside the clock.
template <class Body, class Prepare = bool (*)()>
double median_ns(int iters, int repeats, Body&& body, Prepare prepare = [] { return true; }) {
  std::vector<double> runs;
  for (int r = 0; r <= repeats; ++r) {  // run 0 is the warm-up
    if (!prepare()) return -1;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!body()) return -1;
    }
    auto stop = std::chrono::steady_clock::now();
    if (r > 0) runs.push_back(std::chrono::duration<double, std::nano>(stop - start).count() / iters);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// time(api, which, obj, iters, repeats) -> ns per call; which is one of "dltensor", "managed" (export +
// deleter), "to_python" (owning export feeds an import, then the tensor is dropped), "allocate" (obj
// supplies the prototype; + deleter), "stream" (obj is (device_type, device_id)), "floor" (copy a filled
// DLTensor: the cost no implementation can go below).
PyObject* probe_time(PyObject*, PyObject* args) {
  PyObject *api_obj, *obj;
  const char* which;
  int iters, repeats;
  if (!PyArg_ParseTuple(args, "OsOii", &api_obj, &which, &obj, &iters, &repeats)) return nullptr;
  const DLPackExchangeAPI* api = parse_api(api_obj);
  if (api == nullptr) return nullptr;
  if (iters < 1 || repeats < 1) return PyErr_Format(PyExc_ValueError, "iters and repeats must be positive");
  double ns = -1;
  if (std::strcmp(which, "dltensor") == 0) {
    DLTensor t;
    ns = median_ns(iters, repeats, [&] { return api->dltensor_from_py_object_no_sync(obj, &t) == 0; });
  } else if (std::strcmp(which, "floor") == 0) {
    DLTensor filled, copy;
    if (api->dltensor_from_py_object_no_sync(obj, &filled) != 0) return nullptr;
    volatile int64_t sink = 0;
    ns = median_ns(iters, repeats, [&] {
      std::memcpy(&copy, &filled, sizeof copy);
      sink = sink + copy.ndim;
      return true;
    });
  } else if (std::strcmp(which, "managed") == 0) {
    ns = median_ns(iters, repeats, [&] {
      DLManagedTensorVersioned* m;
      if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return false;
      m->deleter(m);
      return true;
    });
  } else if (std::strcmp(which, "to_python") == 0) {
    std::vector<DLManagedTensorVersioned*> fed(static_cast<size_t>(iters));
    size_t next = 0;
    auto export_all = [&] {  // feeds each timed run with fresh owning exports
      next = 0;
      for (auto& m : fed) {
        if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return false;
      }
      return true;
    };
    ns = median_ns(
        iters, repeats,
        [&] {
          void* py;
          if (api->managed_tensor_to_py_object_no_sync(fed[next++], &py) != 0) return false;
          Py_DECREF(static_cast<PyObject*>(py));
          return true;
        },
        export_all);
  } else if (std::strcmp(which, "allocate") == 0) {
    DLTensor proto;
    if (api->dltensor_from_py_object_no_sync(obj, &proto) != 0) return nullptr;
    ErrorRecord error;
    ns = median_ns(iters, repeats, [&] {
      DLManagedTensorVersioned* m;
      if (api->managed_tensor_allocator(&proto, &m, &error, record_error) != 0) return false;
      m->deleter(m);
      return true;
    });
    if (error.calls) return PyErr_Format(PyExc_RuntimeError, "%s: %s", error.kind, error.message);
  } else if (std::strcmp(which, "stream") == 0) {
    int device_type, device_id;
    if (!PyArg_ParseTuple(obj, "ii", &device_type, &device_id)) return nullptr;
    void* stream;
    ns = median_ns(iters, repeats, [&] {
      return api->current_work_stream(static_cast<DLDeviceType>(device_type), device_id, &stream) == 0;
    });
  } else {
    return PyErr_Format(PyExc_ValueError, "unknown timing %s", which);
  }
  if (ns < 0) return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_RuntimeError, "call failed while timing");
  return PyFloat_FromDouble(ns);
}

PyMethodDef methods[] = {
    {"dltensor", probe_dltensor, METH_VARARGS, "dltensor(api, obj) -> tuple via dltensor_from_py_object_no_sync."},
    {"export", probe_export, METH_VARARGS, "export(api, obj) -> Managed via managed_tensor_from_py_object_no_sync."},
    {"allocate", probe_allocate, METH_VARARGS, "allocate(api, shape, dtype, device) -> Managed."},
    {"current_stream", probe_current_stream, METH_VARARGS, "current_stream(api, device_type, device_id) -> int."},
    {"from_capsule", probe_from_capsule, METH_O, "Managed from a 'dltensor_versioned' capsule."},
    {"make", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(probe_make)), METH_VARARGS | METH_KEYWORDS,
     "Build a DLManagedTensorVersioned field by field (malformed on purpose if asked)."},
    {"deleter_calls", probe_deleter_calls, METH_NOARGS, "How many counted deleters have run."},
    {"read", probe_read, METH_VARARGS, "read(address, nbytes) -> bytes."},
    {"time", probe_time, METH_VARARGS, "time(api, which, obj, iters, repeats) -> median ns per call."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_dlpack_bridge._probe", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__probe() {
  PyType_Slot slots[] = {
      {Py_tp_dealloc, reinterpret_cast<void*>(managed_dealloc)},
      {Py_tp_methods, managed_methods},
      {Py_tp_doc, const_cast<char*>("Owns one DLManagedTensorVersioned; calls its deleter once (on delete() or "
                                    "when dropped).")},
      {0, nullptr},
  };
  PyType_Spec spec = {"torch_dlpack_bridge._probe.Managed", sizeof(Managed), 0, Py_TPFLAGS_DEFAULT, slots};
  ManagedType = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  if (ManagedType == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED
  // Nothing here relies on the GIL (the counter is atomic, ManagedType is set before the module exists), so
  // importing the probe must not turn the GIL back on for the whole process.
  if (m != nullptr && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
#endif
  Py_INCREF(ManagedType);
  if (m != nullptr && PyModule_AddObject(m, "Managed", reinterpret_cast<PyObject*>(ManagedType)) < 0) {
    Py_DECREF(ManagedType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
