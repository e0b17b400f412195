// The op's one schema, its CPU backend, and the autograd guard. The CUDA backend registers itself in
// scaled_mm_cuda.cu; the fake (meta) implementation lives in python/fp8ext/ops.py.
#include <Python.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include "scaled_mm.h"

namespace fp8ext {
namespace {

// scaled_mm has no backward. Rather than return a result whose backward fails later (or silently has no
// grad_fn), refuse at the call while grad mode would record it. Under no_grad()/inference_mode() this passes.
at::Tensor scaled_mm_autograd(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                              const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                              std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const at::Tensor*> inputs[] = {
        {"a", &a}, {"b", &b}, {"scale_a", &scale_a}, {"scale_b", &scale_b},
        {"bias", bias.has_value() ? &*bias : nullptr}};
    for (const auto& [name, t] : inputs) {
      TORCH_CHECK(t == nullptr || !t->requires_grad(), "fp8ext.scaled_mm: ", name,
                  ": requires grad, but fp8ext.scaled_mm is not differentiable (it has no backward). "
                  "Call it under torch.no_grad() or torch.inference_mode(), or pass ", name, ".detach()");
    }
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fp8ext::scaled_mm", "")
                       .typed<decltype(scaled_mm_autograd)>();
  return op.call(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum);
}

}  // namespace

TORCH_LIBRARY(fp8ext, m) {
  m.def(
      "scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(fp8ext, CPU, m) { m.impl("scaled_mm", &scaled_mm_cpu); }

TORCH_LIBRARY_IMPL(fp8ext, Autograd, m) { m.impl("scaled_mm", &scaled_mm_autograd); }

}  // namespace fp8ext

// `import fp8ext._C` loads this library, which registers the ops above with the dispatcher. The module itself
// has no Python functions.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fp8ext native ops (torch.ops.fp8ext)", -1,
                                          nullptr};
  return PyModule_Create(&module_def);
}
