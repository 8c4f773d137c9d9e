// torch_dlpack_bridge._C: hands the table to Python and says what the extension was built against.
#include <Python.h>

#include "bridge.h"
#include "mapping.h"

namespace {

PyObject* exchange_api(PyObject*, PyObject*) {
  return PyCapsule_New(&tdb::g_exchange_api, TDB_EXCHANGE_API_CAPSULE_NAME, nullptr);
}

PyObject* exchange_api_address(PyObject*, PyObject*) { return PyLong_FromVoidPtr(&tdb::g_exchange_api); }

PyObject* build_info(PyObject*, PyObject*) {
  return Py_BuildValue("{s:s,s:O,s:s,s:(ii)}", "torch_version", TORCH_VERSION, "cxx11_abi",
                       _GLIBCXX_USE_CXX11_ABI ? Py_True : Py_False, "compiler", __VERSION__, "dlpack_version",
                       DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
}

PyMethodDef methods[] = {
    {"exchange_api", exchange_api, METH_NOARGS, "The DLPackExchangeAPI table as a 'dlpack_exchange_api' capsule."},
    {"exchange_api_address", exchange_api_address, METH_NOARGS, "The address of the DLPackExchangeAPI table."},
    {"build_info", build_info, METH_NOARGS, "What the extension was compiled against."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_dlpack_bridge._C", nullptr, -1, methods};

// torch's CUDA device type means HIP on a ROCm build; ask torch once instead of per export.
int detect_rocm() {
  PyObject* version = PyImport_ImportModule("torch.version");
  if (version == nullptr) return -1;
  PyObject* hip = PyObject_GetAttrString(version, "hip");
  Py_DECREF(version);
  if (hip == nullptr) return -1;
  tdb::g_cuda_is_rocm = hip != Py_None;
  Py_DECREF(hip);
  return 0;
}

}  // namespace

PyMODINIT_FUNC PyInit__C() {
  if (detect_rocm() != 0) return nullptr;
  return PyModule_Create(&module);
}
