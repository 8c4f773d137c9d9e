/* A DLPack exchange table with one planted defect, for the conformance checker's own tests
 * (tests/planted.py builds it and publishes it on a torch.Tensor subclass). Every function forwards to an inner
 * table (this project's) and then does one thing wrong, chosen by tdb_planted_table's `defect`. Plain C on
 * the Python C API: the checker must see each defect through the ABI alone. */
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torch_dlpack_bridge/dlpack.h"

/* Keep in step with DEFECTS in tests/planted.py. */
enum {
  NONE = 0, OLD_VERSION, PREV_API_CYCLE, NULL_ALLOCATOR, DLTENSOR_OFF_BY_ONE, MANAGED_READ_ONLY, RUNTIME_ERROR,
  DELETER_LEAKS, DELETER_NEEDS_GIL, EXPORT_DROPS_MEMORY, DELETER_ABORTS_AT_EXIT, TO_PYTHON_COPIES,
  TO_PYTHON_LEAKS_ON_FAILURE, ALLOCATOR_WRONG_DTYPE, ALLOCATOR_LEAVES_EXCEPTION, WRONG_TYPE_NO_EXCEPTION,
  STREAM_FAILS, SHARED_SHAPE, NULL_SHAPE_0D, DELETER_HANGS_AT_EXIT, TO_PYTHON_ABORTS_ON_NEGATIVE_STRIDES,
  TO_PYTHON_DROPS_ZERO_STRIDES, TO_PYTHON_UNUSED_STRIDE_NO_EXCEPTION, TO_PYTHON_NULL_DATA_LEAKS,
  TO_PYTHON_NULL_DATA_IMPORTED, TO_PYTHON_NULL_SHAPE_DELETES_TWICE, TO_PYTHON_IGNORES_BYTE_OFFSET,
  TO_PYTHON_READS_NULL_STRIDES, TO_PYTHON_NEGATIVE_SHAPE_EMPTY
};

static const DLPackExchangeAPI* inner;
static DLPackExchangeAPI table;
static int defect;
static int64_t shared_shape[64]; /* SHARED_SHAPE: one shape array for every export */

/* An export: our own copy of the inner one (shape and strides too), so the inner one may be released early. */
typedef struct {
  DLManagedTensorVersioned outer;
  DLManagedTensorVersioned* inner;
  PyObject* source;
  int64_t shape[64], strides[64];
} Wrapped;

static int interpreter_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/* The failure path of both exports: may swap the exception for a worse one. */
static int failed(void) {
  if (defect == RUNTIME_ERROR && PyErr_ExceptionMatches(PyExc_BufferError)) {
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, "planted: a RuntimeError where BufferError belongs");
  }
  if (defect == WRONG_TYPE_NO_EXCEPTION) PyErr_Clear();
  return -1;
}

static void wrapped_deleter(DLManagedTensorVersioned* self) {
  Wrapped* w = (Wrapped*)self->manager_ctx;
  if (defect == DELETER_NEEDS_GIL && !PyGILState_Check()) abort();
  if (defect == DELETER_ABORTS_AT_EXIT && interpreter_finalizing()) abort();
  if (defect == DELETER_HANGS_AT_EXIT && interpreter_finalizing()) {
    for (;;) pause();
  }
  if (w->inner != NULL) w->inner->deleter(w->inner);
  if (w->source != NULL && defect != DELETER_LEAKS) {
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(w->source);
    PyGILState_Release(state);
  }
  free(w);
}

static int managed_from(void* obj, DLManagedTensorVersioned** out) {
  DLManagedTensorVersioned* m = NULL;
  if (inner->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return failed();
  Wrapped* w = (Wrapped*)calloc(1, sizeof(Wrapped));
  if (w == NULL) {
    m->deleter(m);
    PyErr_NoMemory();
    return -1;
  }
  w->outer = *m;
  w->inner = m;
  w->source = (PyObject*)obj;
  Py_INCREF(w->source);
  const int32_t ndim = m->dl_tensor.ndim;
  memcpy(w->shape, m->dl_tensor.shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(w->strides, m->dl_tensor.strides, sizeof(int64_t) * (size_t)ndim);
  w->outer.dl_tensor.shape = w->shape;
  w->outer.dl_tensor.strides = w->strides;
  w->outer.manager_ctx = w;
  w->outer.deleter = wrapped_deleter;
  if (defect == MANAGED_READ_ONLY) w->outer.flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  if (defect == SHARED_SHAPE) {
    memcpy(shared_shape, w->shape, sizeof(int64_t) * (size_t)ndim);
    w->outer.dl_tensor.shape = shared_shape;
  }
  if (defect == NULL_SHAPE_0D && ndim == 0) w->outer.dl_tensor.shape = w->outer.dl_tensor.strides = NULL;
  if (defect == EXPORT_DROPS_MEMORY) { /* keeps neither the tensor nor the object: only the source does */
    m->deleter(m);
    w->inner = NULL;
    Py_DECREF(w->source);
    w->source = NULL;
  }
  *out = &w->outer;
  return 0;
}

static int dltensor_from(void* obj, DLTensor* out) {
  if (inner->dltensor_from_py_object_no_sync(obj, out) != 0) return failed();
  if (defect == DLTENSOR_OFF_BY_ONE) out->byte_offset += (out->dtype.bits * out->dtype.lanes + 7) / 8;
  if (defect == NULL_SHAPE_0D && out->ndim == 0) out->shape = out->strides = NULL;
  return 0;
}

static float zeros[64];

/* The import defects: each mishandles one corner of the checker's import cases (rewriting `m` in place before
 * the inner table sees it, where the defect is a misreading). Returns 1 when it has answered the call itself. */
static int import_defect(DLManagedTensorVersioned* m, int* rc) {
  DLTensor* t = &m->dl_tensor;
  int64_t numel = 1;
  for (int32_t i = 0; t->shape != NULL && i < t->ndim; ++i) numel *= t->shape[i];
  for (int32_t i = 0; t->strides != NULL && i < t->ndim; ++i) {
    if (t->strides[i] < 0 && defect == TO_PYTHON_ABORTS_ON_NEGATIVE_STRIDES && t->shape[i] > 1) abort();
    if (t->strides[i] < 0 && defect == TO_PYTHON_UNUSED_STRIDE_NO_EXCEPTION) {
      m->deleter(m);
      *rc = -1; /* and no Python exception */
      return 1;
    }
    if (t->strides[i] == 0 && defect == TO_PYTHON_DROPS_ZERO_STRIDES) t->strides[i] = t->shape[t->ndim - 1];
  }
  if (t->data == NULL && defect == TO_PYTHON_NULL_DATA_LEAKS) {
    PyErr_SetString(PyExc_BufferError, "planted: NULL data refused without calling the deleter");
    *rc = -1;
    return 1;
  }
  if (t->data == NULL && numel > 0 && defect == TO_PYTHON_NULL_DATA_IMPORTED) t->data = zeros;
  if (t->shape == NULL && defect == TO_PYTHON_NULL_SHAPE_DELETES_TWICE) m->deleter(m);
  if (defect == TO_PYTHON_IGNORES_BYTE_OFFSET) t->byte_offset = 0;
  if (t->ndim > 0 && t->strides == NULL && defect == TO_PYTHON_READS_NULL_STRIDES) {
    (void)*(volatile int64_t*)t->strides; /* a naive consumer: strides are never NULL */
  }
  for (int32_t i = 0; defect == TO_PYTHON_NEGATIVE_SHAPE_EMPTY && t->shape != NULL && i < t->ndim; ++i) {
    if (t->shape[i] < 0) t->shape[i] = 0;
  }
  return 0;
}

static int to_python(DLManagedTensorVersioned* m, void** out) {
  int rc = 0;
  if (m->version.major == DLPACK_MAJOR_VERSION && import_defect(m, &rc)) return rc;
  if (defect == TO_PYTHON_LEAKS_ON_FAILURE && m->version.major != DLPACK_MAJOR_VERSION) {
    PyErr_SetString(PyExc_BufferError, "planted: refused without calling the deleter");
    return -1;
  }
  if (inner->managed_tensor_to_py_object_no_sync(m, out) != 0) return -1;
  if (defect == TO_PYTHON_COPIES) {
    PyObject* copy = PyObject_CallMethod((PyObject*)*out, "clone", NULL);
    Py_DECREF((PyObject*)*out);
    *out = copy;
    if (copy == NULL) return -1;
  }
  return 0;
}

static int allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                    void (*SetError)(void*, const char*, const char*)) {
  const int rc = inner->managed_tensor_allocator(prototype, out, error_ctx, SetError);
  if (rc != 0 && defect == ALLOCATOR_LEAVES_EXCEPTION) PyErr_SetString(PyExc_RuntimeError, "planted: left set");
  if (rc == 0 && defect == ALLOCATOR_WRONG_DTYPE) (*out)->dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
  if (rc == 0 && defect == NULL_SHAPE_0D && (*out)->dl_tensor.ndim == 0) {
    (*out)->dl_tensor.shape = (*out)->dl_tensor.strides = NULL;
  }
  return rc;
}

static int current_stream(DLDeviceType type, int32_t id, void** out) {
  if (defect == STREAM_FAILS) {
    PyErr_SetString(PyExc_RuntimeError, "planted: no stream");
    return -1;
  }
  return inner->current_work_stream(type, id, out);
}

/* The table with `planted` defect, forwarding to `inner_api`. One table per process: the last call wins. */
const DLPackExchangeAPI* tdb_planted_table(const DLPackExchangeAPI* inner_api, int planted) {
  inner = inner_api;
  defect = planted;
  table.header.version.major = DLPACK_MAJOR_VERSION;
  table.header.version.minor = defect == OLD_VERSION ? 1 : DLPACK_MINOR_VERSION;
  table.header.prev_api = defect == PREV_API_CYCLE ? &table.header : NULL;
  table.managed_tensor_allocator = defect == NULL_ALLOCATOR ? NULL : allocate;
  table.managed_tensor_from_py_object_no_sync = managed_from;
  table.managed_tensor_to_py_object_no_sync = to_python;
  table.dltensor_from_py_object_no_sync = dltensor_from;
  table.current_work_stream = current_stream;
  return &table;
}
