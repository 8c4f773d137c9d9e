// axpy_cuda: the CUDA version of axpy_kernels.axpy_, taking torch CUDA tensors through
// torch_dlpack_bridge/tensor.h (typed parameters over consumer.h). Build with `make cuda`
// (nvcc; no torch include or link). The kernel takes the tensors' accessors by value
// (tdb::StridedView, tdb::ContiguousView).
//
//   axpy_(a, x, y)   y = a*x + y in place; 1-D float32 CUDA vectors on the same device,
//                    x any stride, y contiguous. Runs asynchronously on the producer's
//                    current stream (torch.cuda.current_stream()), so it is ordered with
//                    torch's own work. Returns y.
#include <cuda_runtime.h>

#include <string>

#include "torch_dlpack_bridge/tensor.h"

namespace {

// What the kernel accepts: 1-D float32 CUDA vectors, x read with any stride, y written
// and dense.
using Vector = tdb::Tensor<const float, tdb::ndim<1>, tdb::device::cuda>;
using DenseVector = tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cuda>;

// x(i) multiplies i by x's stride; y(i) indexes the dense y directly. Both views are
// plain values.
__global__ void axpy_kernel(float a, tdb::StridedView<const float, 1> x,
                            tdb::ContiguousView<float, 1> y) {
  const int64_t n = y.size(0);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step)
    y(i) += a * x(i);
}

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw tdb::Error(PyExc_RuntimeError,
                     std::string(what) + ": " + cudaGetErrorString(err));
}

// Makes `device` current for the scope of the launch and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(prev_); }

 private:
  int prev_ = 0;
};

PyObject* axpy_(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return tdb::guard([&]() -> PyObject* {
    if (nargs != 3)
      throw tdb::Error(PyExc_TypeError, "axpy_() takes 3 arguments (a, x, y)");
    const double a = PyFloat_AsDouble(args[0]);
    if (a == -1.0 && PyErr_Occurred()) throw tdb::Error::pending();
    // checked: "argument 'x': expected a cuda tensor, got cpu", ...
    Vector x(args[1], "x");
    DenseVector y(args[2], "y");
    tdb::check_same_device(x, y);
    tdb::check_same_shape(x, y);
    const int64_t n = y.size(0);
    if (n > 0) {
      DeviceScope scope(y.device().device_id);
      cudaStream_t stream =
          static_cast<cudaStream_t>(tdb::current_stream(y.api(), y.device()));
      const int threads = 256;
      const int64_t needed = (n + threads - 1) / threads;
      const int blocks = static_cast<int>(needed < 4096 ? needed : 4096);
      axpy_kernel<<<blocks, threads, 0, stream>>>(static_cast<float>(a), x.view(),
                                                  y.view());
      check_cuda(cudaGetLastError(), "axpy_kernel launch");
    }
    Py_INCREF(args[2]);
    return args[2];
  });
}

PyMethodDef methods[] = {
    {"axpy_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(axpy_)),
     METH_FASTCALL,
     "axpy_(a, x, y): y = a*x + y in place on CUDA, on the current stream. Returns y."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "axpy_cuda",
                      "CUDA axpy over the DLPack exchange table.",
                      -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_axpy_cuda() { return PyModule_Create(&module); }
