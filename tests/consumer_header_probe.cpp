// A test extension of consumer.h (no torch include or link), built by tests/test_consumer_header.py.
#include <new>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include "torch_dlpack_bridge/consumer.h"
#include "torch_dlpack_bridge/autograd.h"

namespace {
const DLPackExchangeAPI* g_base = nullptr;  // the table make_table() copies (torch's)
long g_deleted = 0;                          // calls of counting_deleter
std::unordered_map<DLManagedTensorVersioned*, void (*)(DLManagedTensorVersioned*)> g_deleters;

void counting_deleter(DLManagedTensorVersioned* t) {
  ++g_deleted;
  auto it = g_deleters.find(t);
  auto original = it->second;
  g_deleters.erase(it);
  if (original) original(t);
}
DLManagedTensorVersioned* count(DLManagedTensorVersioned* t) {
  g_deleters[t] = t->deleter;
  t->deleter = counting_deleter;
  return t;
}
int fake_cuda_view(void* obj, DLTensor* out) {
  int rc = g_base->dltensor_from_py_object_no_sync(obj, out);
  out->device = DLDevice{kDLCUDA, 0};
  return rc;
}
// The "offset" table: torch's exports with data moved back kShift bytes and byte_offset set to match (torch
// gives byte_offset 0). The moved pointer is never dereferenced by a consumer that honours byte_offset.
constexpr uint64_t kShift = 64;
void shift(DLTensor* t) {
  t->data = static_cast<char*>(t->data) - kShift;
  t->byte_offset += kShift;
}
int offset_view(void* obj, DLTensor* out) {
  int rc = g_base->dltensor_from_py_object_no_sync(obj, out);
  if (rc == 0) shift(out);
  return rc;
}
int offset_managed(void* obj, DLManagedTensorVersioned** out) {
  int rc = g_base->managed_tensor_from_py_object_no_sync(obj, out);
  if (rc == 0) shift(&(*out)->dl_tensor);
  return rc;
}
int failing_alloc(DLTensor*, DLManagedTensorVersioned** out, void* ctx, void (*set_error)(void*, const char*, const char*)) {
  *out = nullptr;
  set_error(ctx, "MemoryError", "fake allocator is out of memory");
  return -1;
}
// An allocator that allocates another dtype than asked (int32 for float32: the same size, only the dtype tells).
int other_dtype_alloc(DLTensor* prototype, DLManagedTensorVersioned** out, void* ctx,
                      void (*set_error)(void*, const char*, const char*)) {
  DLTensor asked = *prototype;
  asked.dtype = DLDataType{kDLInt, 32, 1};
  return g_base->managed_tensor_allocator(&asked, out, ctx, set_error);
}
PyObject* ptr(const void* p) { return PyLong_FromVoidPtr(const_cast<void*>(p)); }
PyObject* tuple(const int64_t* v, int32_t n) {
  PyObject* t = PyTuple_New(n);
  for (int32_t i = 0; i < n; ++i) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(v[i]));
  return t;
}

// make_table(base_capsule, major, minor, prev_capsule_or_None, variant) -> capsule (table leaked on purpose)
PyObject* make_table(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    PyObject *base, *prev;
    unsigned major, minor;
    const char* variant;
    if (!PyArg_ParseTuple(args, "OIIOs", &base, &major, &minor, &prev, &variant)) throw tdb::Error::pending();
    g_base = static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(base, "dlpack_exchange_api"));
    if (!g_base) throw tdb::Error::pending();
    auto* t = new DLPackExchangeAPI(*g_base);
    t->header.version = DLPackVersion{major, minor};
    t->header.prev_api = prev == Py_None ? nullptr
        : static_cast<DLPackExchangeAPIHeader*>(PyCapsule_GetPointer(prev, "dlpack_exchange_api"));
    std::string v = variant;
    if (v == "no_view") t->dltensor_from_py_object_no_sync = nullptr;
    if (v == "fake_cuda") t->dltensor_from_py_object_no_sync = fake_cuda_view;
    if (v == "failing_alloc") t->managed_tensor_allocator = failing_alloc;
    if (v == "other_dtype_alloc") t->managed_tensor_allocator = other_dtype_alloc;
    if (v == "offset") {
      t->dltensor_from_py_object_no_sync = offset_view;
      t->managed_tensor_from_py_object_no_sync = offset_managed;
    }
    if (v == "null_stream_fn") t->current_work_stream = nullptr;
    return PyCapsule_New(t, v == "bad_name" ? "not_dlpack" : "dlpack_exchange_api", nullptr);
  });
}

PyObject* api_ptr(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    PyObject* obj;
    const char* name;
    if (!PyArg_ParseTuple(args, "Os", &obj, &name)) throw tdb::Error::pending();
    return ptr(tdb::exchange_api(obj, name));
  });
}

// is_tensor(obj): what the binding casters ask before taking an argument as a tensor.
PyObject* is_tensor(PyObject*, PyObject* obj) { return PyBool_FromLong(tdb::is_dlpack_tensor(obj)); }

// cached_types(): the types in both levels of the per-type table cache.
PyObject* cached_types(PyObject*, PyObject*) {
  PyObject* list = PyList_New(0);
  for (const auto& slot : tdb::detail::table_cache().types)
    if (PyTypeObject* t = slot.load()) PyList_Append(list, reinterpret_cast<PyObject*>(t));
  for (const auto& slot : tdb::detail::table_cache().overflow)
    if (const tdb::detail::TableCache::Entry* e = slot.load()) PyList_Append(list, reinterpret_cast<PyObject*>(e->type));
  return list;
}

// cache_claims([n]): the cache's count of claimed fast slots; with n, sets it first (as if n types had been
// cached: a long-running process, without running it for days).
PyObject* cache_claims(PyObject*, PyObject* args) {
  int n = -1;
  if (!PyArg_ParseTuple(args, "|i", &n)) return nullptr;
  if (n >= 0) tdb::detail::table_cache().used.store(n);
  return PyLong_FromLong(tdb::detail::table_cache().used.load());
}

PyObject* view_info(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    PyObject* obj;
    if (!PyArg_ParseTuple(args, "O", &obj)) throw tdb::Error::pending();
    tdb::TensorView v(obj, "t");
    const DLTensor& t = v.dl();
    return Py_BuildValue("{sNsisNsNs(iii)s(ii)sisNss}", "data", ptr(v.data<char>()), "ndim", v.ndim(),
                         "shape", tuple(t.shape, t.ndim), "strides", tuple(t.strides, t.ndim), "dtype",
                         t.dtype.code, t.dtype.bits, t.dtype.lanes, "device", int(t.device.device_type),
                         t.device.device_id, "numel", int(v.numel()), "contiguous", PyBool_FromLong(v.is_contiguous()),
                         "dtype_name", tdb::dtype_name(t.dtype).c_str());
  });
}

// managed(obj, mode): exercises the owning handle with a counting deleter; returns a tensor or None.
PyObject* managed(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    PyObject* obj;
    const char* mode_c;
    if (!PyArg_ParseTuple(args, "Os", &obj, &mode_c)) throw tdb::Error::pending();
    std::string mode = mode_c;
    tdb::ManagedTensor m = tdb::ManagedTensor::from_python(obj, "t");
    const DLPackExchangeAPI* api = m.api();
    count(m.get());
    if (mode == "drop") Py_RETURN_NONE;
    if (mode == "reset_twice") { m.reset(); m.reset(); Py_RETURN_NONE; }
    if (mode == "move") { tdb::ManagedTensor n(std::move(m)); tdb::ManagedTensor k = std::move(n); Py_RETURN_NONE; }
    if (mode == "move_assign") {
      tdb::ManagedTensor other = tdb::ManagedTensor::from_python(obj, "t");
      count(other.get());
      other = std::move(m);  // frees other's first tensor
      other = std::move(other);
      Py_RETURN_NONE;
    }
    if (mode == "release") { DLManagedTensorVersioned* raw = m.release(); raw->deleter(raw); Py_RETURN_NONE; }
    if (mode == "to_python") return m.to_python();
    if (mode == "throw") throw std::runtime_error("thrown while holding a tensor");
    if (mode == "pending") { PyErr_SetString(PyExc_KeyError, "kept"); throw tdb::Error::pending(); }
    if (mode == "bad_major") {
      DLManagedTensorVersioned* raw = m.release();
      raw->version.major = 99;
      tdb::ManagedTensor adopted(raw, api);
    }
    throw tdb::Error(PyExc_ValueError, "unknown mode");
  });
}

PyObject* deleted(PyObject*, PyObject*) { return PyLong_FromLong(g_deleted); }

// drop_on_thread(obj): exports obj, moves the owning handle to a new native thread and lets it go out of scope
// there, without the GIL (the main thread waits with the GIL released). Returns the deleter calls seen.
PyObject* drop_on_thread(PyObject*, PyObject* obj) {
  return tdb::guard([&]() -> PyObject* {
    tdb::ManagedTensor m = tdb::ManagedTensor::from_python(obj, "t");
    count(m.get());
    const long before = g_deleted;
    bool started = true;
    Py_BEGIN_ALLOW_THREADS
    try {
      std::thread([owned = std::move(m)]() mutable { tdb::ManagedTensor last = std::move(owned); }).join();
    } catch (...) {
      started = false;
    }
    Py_END_ALLOW_THREADS
    if (!started) throw tdb::Error(PyExc_RuntimeError, "could not start a thread");
    return PyLong_FromLong(g_deleted - before);
  });
}

// managed_info(obj): flags, version and api pointer of an owning export (table or __dlpack__), then drops it.
PyObject* managed_info(PyObject*, PyObject* obj) {
  return tdb::guard([&]() -> PyObject* {
    tdb::ManagedTensor m = tdb::ManagedTensor::from_python(obj, "t");
    const DLTensor& t = m.dl();
    return Py_BuildValue("{sKs(II)sNsNsN}", "flags", static_cast<unsigned long long>(m.flags()), "version",
                         m.get()->version.major, m.get()->version.minor, "api", ptr(m.api()), "data",
                         ptr(tdb::data_ptr<char>(t)), "strides", tuple(t.strides, t.ndim));
  });
}

// view_alloc(obj): allocate_like() on a view of obj; refused for a producer without a table.
PyObject* view_alloc(PyObject*, PyObject* obj) {
  return tdb::guard([&]() -> PyObject* {
    tdb::TensorView v(obj, "x");
    return tdb::allocate_like(v).to_python();
  });
}

// alloc(like, shape, (code, bits, lanes)) -> new tensor from like's producer
PyObject* alloc(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    PyObject *like, *shape;
    int code, bits, lanes;
    if (!PyArg_ParseTuple(args, "OO!(iii)", &like, &PyTuple_Type, &shape, &code, &bits, &lanes))
      throw tdb::Error::pending();
    std::vector<int64_t> dims;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); ++i) dims.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i)));
    DLDataType dt{uint8_t(code), uint8_t(bits), uint16_t(lanes)};
    return tdb::allocate(tdb::exchange_api(like, "like"), int32_t(dims.size()), dims.data(), dt, tdb::kCPU).to_python();
  });
}

PyObject* stream(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    PyObject* obj;
    int type, id;
    if (!PyArg_ParseTuple(args, "Oii", &obj, &type, &id)) throw tdb::Error::pending();
    return ptr(tdb::current_stream(tdb::exchange_api(obj, "t"), DLDevice{DLDeviceType(type), id}));
  });
}

// check(what, x, other): runs one check on the view of x named "x" (other: argument of the check).
PyObject* check(PyObject*, PyObject* args) {
  return tdb::guard([&]() -> PyObject* {
    const char* what_c;
    PyObject *xo, *other;
    if (!PyArg_ParseTuple(args, "sOO", &what_c, &xo, &other)) throw tdb::Error::pending();
    std::string what = what_c;
    tdb::TensorView x(xo, "x");
    if (what == "dtype") tdb::check_dtype(x, tdb::kFloat32);
    else if (what == "device_type") tdb::check_device(x, kDLCPU);
    else if (what == "device") tdb::check_device(x, DLDevice{kDLCUDA, 1});
    else if (what == "ndim") tdb::check_ndim(x, 1);
    else if (what == "shape") tdb::check_shape(x, {-1, 3});
    else if (what == "contiguous") tdb::check_contiguous(x);
    else if (what == "writable") tdb::check_writable(x);
    else {
      tdb::TensorView y(other, "y");
      if (what == "same_shape") tdb::check_same_shape(x, y);
      else if (what == "same_device") tdb::check_same_device(x, y);
      else throw tdb::Error(PyExc_ValueError, "unknown check");
    }
    Py_RETURN_NONE;
  });
}

PyObject* names(PyObject*, PyObject* args) {
  int code, bits, lanes, type, id;
  if (!PyArg_ParseTuple(args, "(iii)(ii)", &code, &bits, &lanes, &type, &id)) return nullptr;
  return Py_BuildValue("(ss)", tdb::dtype_name(DLDataType{uint8_t(code), uint8_t(bits), uint16_t(lanes)}).c_str(),
                       tdb::device_name(DLDevice{DLDeviceType(type), id}).c_str());
}

PyObject* raise_cpp(PyObject*, PyObject* arg) {
  long kind = PyLong_AsLong(arg);
  return tdb::guard([&]() -> PyObject* {
    if (kind == 0) throw std::runtime_error("plain C++ error");
    if (kind == 1) throw std::bad_alloc();
    if (kind == 2) throw 42;
    throw tdb::Error(PyExc_LookupError, "tdb error");
  });
}

// refuses_write(obj): autograd_refuses_write() as a written typed parameter asks it once the view is taken
// (which caches type(obj)'s table and probe): None when the kernel may write obj, else the refusal.
PyObject* refuses_write(PyObject*, PyObject* obj) {
  tdb::find_exchange_api(Py_TYPE(obj));
  if (const char* why = tdb::detail::autograd_refuses_write(obj)) return PyUnicode_FromString(why);
  Py_RETURN_NONE;
}

// commit_write(obj): the bump a written typed parameter makes once its overload is chosen (autograd.h).
PyObject* commit_write(PyObject*, PyObject* obj) {
  tdb::find_exchange_api(Py_TYPE(obj));
  tdb::detail::commit_write(obj);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"refuses_write", refuses_write, METH_O, nullptr}, {"commit_write", commit_write, METH_O, nullptr},
    {"make_table", make_table, METH_VARARGS, nullptr}, {"api_ptr", api_ptr, METH_VARARGS, nullptr},
    {"is_tensor", is_tensor, METH_O, nullptr},
    {"cached_types", cached_types, METH_NOARGS, nullptr}, {"cache_claims", cache_claims, METH_VARARGS, nullptr}, {"view_info", view_info, METH_VARARGS, nullptr},
    {"managed", managed, METH_VARARGS, nullptr}, {"deleted", deleted, METH_NOARGS, nullptr},
    {"drop_on_thread", drop_on_thread, METH_O, nullptr}, {"managed_info", managed_info, METH_O, nullptr},
    {"view_alloc", view_alloc, METH_O, nullptr},
    {"alloc", alloc, METH_VARARGS, nullptr}, {"stream", stream, METH_VARARGS, nullptr},
    {"check", check, METH_VARARGS, nullptr}, {"names", names, METH_VARARGS, nullptr},
    {"raise_cpp", raise_cpp, METH_O, nullptr}, {nullptr, nullptr, 0, nullptr}};
PyModuleDef module = {PyModuleDef_HEAD_INIT, "tdb_probe", nullptr, -1, methods};
}  // namespace

PyMODINIT_FUNC PyInit_tdb_probe() { return PyModule_Create(&module); }
