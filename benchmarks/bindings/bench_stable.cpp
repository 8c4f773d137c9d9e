// bench_stable: the pybind11 caster kernel authors write for torch's stable ABI (torch >= 2.14), for
// benchmarks/bindings.py. type_caster<torch::stable::Tensor> checks isinstance(obj, torch.Tensor) and wraps the
// tensor in a new stable handle through the C shim torch_tensor_from_pyobject (TransformerEngine's caster does the
// same). Built with TORCH_STABLE_ONLY against the installed torch's headers, linked to libtorch_cpu only; the same
// pybind11 as bench_pybind11. f0(), f1(x), f3(x, y, z), f8(a..h) read each data pointer.
#include <pybind11/pybind11.h>
#include <torch/csrc/stable/pyobject.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>

namespace pybind11::detail {
template <>
struct type_caster<torch::stable::Tensor> {
  // As in the casters written for it: `value` is default-constructed, which makes an empty tensor handle of its
  // own before load() replaces it.
  PYBIND11_TYPE_CASTER(torch::stable::Tensor, const_name("torch.Tensor"));

  bool load(handle src, bool) {
    static PyObject* tensor_type = object(module_::import("torch").attr("Tensor")).release().ptr();  // kept
    int is_tensor = PyObject_IsInstance(src.ptr(), tensor_type);
    if (is_tensor < 0) throw error_already_set();
    if (!is_tensor) return false;
    value = torch::stable::tensor_from_pyobject(src.ptr());
    return true;
  }

  static handle cast(const torch::stable::Tensor& t, return_value_policy, handle) {
    return static_cast<PyObject*>(torch::stable::tensor_to_pyobject(t));
  }
};
}  // namespace pybind11::detail

namespace {
volatile uintptr_t g_sink;
uintptr_t addr(const torch::stable::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }
}  // namespace

PYBIND11_MODULE(bench_stable, m) {
  using T = const torch::stable::Tensor&;
  m.def("f0", []() {});
  m.def("f1", [](T x) { g_sink = addr(x); });
  m.def("f3", [](T x, T y, T z) { g_sink = addr(x) + addr(y) + addr(z); });
  m.def("f8", [](T a, T b, T c, T d, T e, T f, T g, T h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
}
