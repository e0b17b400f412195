// The ops' schemas and the autograd guards. The backends register themselves: scaled_mm in scaled_mm_cpu.cpp and
// scaled_mm_cuda.cu, quantize_rowwise in quantize_rowwise_op.cpp (CPU) and quantize_rowwise_cuda.cpp, the internal
// ops without tensors in internal_ops.cpp; the fake (meta) implementations live in
// python/fp8ext/ops.py and quantize.py.
#include <Python.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>


namespace fp8ext {
namespace {

// The ops have no backward. Rather than return a result whose backward fails later (or silently has no grad_fn),
// refuse at the call while grad mode would record it. Under no_grad()/inference_mode() this passes.
void refuse_grad(const char* op, const char* name, const at::Tensor* t) {
  TORCH_CHECK(t == nullptr || !t->requires_grad(), op, ": ", name, ": requires grad, but ", op,
              " is not differentiable (it has no backward). Call it under torch.no_grad() or "
              "torch.inference_mode(), or pass ", name, ".detach()");
}

at::Tensor scaled_mm_autograd(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                              const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                              std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const at::Tensor*> inputs[] = {
        {"a", &a}, {"b", &b}, {"scale_a", &scale_a}, {"scale_b", &scale_b},
        {"bias", bias.has_value() ? &*bias : nullptr}};
    for (const auto& [name, t] : inputs) refuse_grad("fp8ext.scaled_mm", name, t);
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fp8ext::scaled_mm", "")
                       .typed<decltype(scaled_mm_autograd)>();
  return op.call(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum);
}

std::tuple<at::Tensor, at::Tensor> quantize_rowwise_autograd(const at::Tensor& x, std::optional<at::ScalarType> dtype,
                                                             std::optional<double> scale_ub) {
  if (at::GradMode::is_enabled()) refuse_grad("fp8ext.quantize_rowwise", "x", &x);
  at::AutoDispatchBelowADInplaceOrView guard;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fp8ext::quantize_rowwise", "")
                       .typed<decltype(quantize_rowwise_autograd)>();
  return op.call(x, dtype, scale_ub);
}

}  // namespace

TORCH_LIBRARY(fp8ext, m) {
  m.def(
      "scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
  m.def(
      "_check_scaled_mm_meta(int[] a, ScalarType a_dtype, Device a_device, int[] b, ScalarType b_dtype, "
      "Device b_device, int[] scale_a, ScalarType scale_a_dtype, Device scale_a_device, int[] scale_b, "
      "ScalarType scale_b_dtype, Device scale_b_device, int[]? bias, ScalarType? bias_dtype, Device? bias_device, "
      "ScalarType? out_dtype) -> ()");
  m.def("quantize_rowwise(Tensor x, ScalarType? dtype=None, float? scale_ub=None) -> (Tensor, Tensor)");
  m.def(
      "_check_quantize_rowwise_meta(int[] sizes, int[] strides, ScalarType x_dtype, ScalarType? dtype, "
      "float? scale_ub) -> ()");
  m.def("_autotune_cache_read(str path) -> (str, str[])");
  m.def("_autotune_cache_write(str path, str[] buckets, str[] kernels) -> str");
}

TORCH_LIBRARY_IMPL(fp8ext, Autograd, m) {
  m.impl("scaled_mm", &scaled_mm_autograd);
  m.impl("quantize_rowwise", &quantize_rowwise_autograd);
}

}  // namespace fp8ext

// `import fp8ext._C` loads this library, which registers the ops above with the dispatcher. The module itself
// has no Python functions.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fp8ext native ops (torch.ops.fp8ext)", -1,
                                          nullptr};
  return PyModule_Create(&module_def);
}
