// axpy_kernels: CPU kernels that take torch tensors (or any DLPack 1.3 producer's
// tensors) through torch_dlpack_bridge/tensor.h (typed parameters over consumer.h). No
// torch headers, no torch link: only Python.h and the DLPack table.
//
//   axpy_(a, x, y)    y = a*x + y in place; 1-D float32 CPU vectors of equal length.
//                     Like BLAS axpy, x may have any stride (even negative or zero); y
//                     must be contiguous. Returns y. x may be y itself; x must not
//                     otherwise overlap y.
//   scaled_copy(a, x) a new contiguous float32 tensor a*x, any shape and strides of x,
//                     allocated by x's producer (a torch.Tensor for a torch.Tensor x).
#include "torch_dlpack_bridge/tensor.h"

namespace {

// What the kernels accept, declared once: the constructors check it and name the
// argument in any error.
using Vector =  // any stride, read
    tdb::Tensor<const float, tdb::ndim<1>, tdb::device::cpu>;
using DenseVector =  // written in place
    tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
using AnyShape =  // any rank and strides
    tdb::Tensor<const float, tdb::device::cpu>;

// A real number argument named `name`, or TypeError naming it.
float real_arg(PyObject* obj, const char* name) {
  double v = PyFloat_AsDouble(obj);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw tdb::Error(PyExc_TypeError, std::string("argument '") + name +
                                          "': expected a real number, got '" +
                                          Py_TYPE(obj)->tp_name + "'");
  }
  return static_cast<float>(v);
}

void check_nargs(const char* fn, Py_ssize_t nargs, Py_ssize_t want) {
  if (nargs != want)
    throw tdb::Error(PyExc_TypeError, std::string(fn) + "() takes " +
                                          std::to_string(want) + " arguments (" +
                                          std::to_string(nargs) + " given)");
}

PyObject* axpy_(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return tdb::guard([&]() -> PyObject* {
    check_nargs("axpy_", nargs, 3);
    const float a = real_arg(args[0], "a");
    Vector x(args[1], "x");  // borrowed views, checked: valid during this call
    DenseVector y(args[2], "y");
    tdb::check_same_shape(x, y);
    // tdb::StridedView<const float, 1>: xv(i) is xp[i * stride]
    const auto xv = x.view();
    // tdb::ContiguousView<float, 1>: yv(i) is yp[i]
    const auto yv = y.view();
    for (int64_t i = 0, n = yv.size(0); i < n; ++i) yv(i) += a * xv(i);
    Py_INCREF(args[2]);
    return args[2];
  });
}

PyObject* scaled_copy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return tdb::guard([&]() -> PyObject* {
    check_nargs("scaled_copy", nargs, 2);
    const float a = real_arg(args[0], "a");
    AnyShape x(args[1], "x");
    tdb::ManagedTensor out = tdb::allocate_like(x);  // owned here until to_python()
    const float* xp = x.data();
    float* op = tdb::data_ptr<float>(out.dl());
    tdb::for_each_offset(x.dl(), [&](int64_t i, int64_t off) { op[i] = a * xp[off]; });
    return out.to_python();  // ownership goes to the new Python tensor
  });
}

PyMethodDef methods[] = {
    {"axpy_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(axpy_)),
     METH_FASTCALL,
     "axpy_(a, x, y): y = a*x + y in place (1-D float32 CPU; x any stride, "
     "y contiguous). Returns y."},
    {"scaled_copy",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(scaled_copy)),
     METH_FASTCALL,
     "scaled_copy(a, x): new contiguous float32 tensor a*x, allocated by x's producer."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "axpy_kernels",
                      "Example kernels over the DLPack exchange table.",
                      -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_axpy_kernels() { return PyModule_Create(&module); }
