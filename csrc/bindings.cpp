// The ops' schemas (scaled_mm, quantize_rowwise), their CPU backends, the autograd guards, and the autotune cache
// file's reader and writer. The CUDA backends register themselves in scaled_mm_cuda.cu and
// quantize_rowwise_cuda.cpp; the fake (meta) implementations live in python/fp8ext/ops.py and quantize.py.
#include <Python.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include "quantize_rowwise_op.h"
#include "scaled_mm.h"
#include "sm90/autotune_cache.h"

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

// Validation on metadata alone, for the fake implementation (python/fp8ext/ops.py): each operand comes as
// [dim, sizes..., strides..., storage_offset], its dtype and its device. The address of a traced tensor is
// unknown; the caching allocators hand out storages aligned to far more than 16 bytes, so its alignment is that
// of its storage offset.
TensorMeta operand_meta(at::IntArrayRef v, at::ScalarType dtype, at::Device device) {
  TORCH_CHECK(!v.empty() && v[0] >= 0 && v.size() == static_cast<size_t>(2 * v[0] + 2),
              "fp8ext._check_scaled_mm_meta: malformed operand metadata ", v);
  const auto dim = static_cast<size_t>(v[0]);
  const int64_t offset = v[2 * dim + 1];
  return {v.slice(1, dim), v.slice(1 + dim, dim), dtype, {device.type(), device.index()}, offset,
          static_cast<std::uintptr_t>(offset) * c10::elementSize(dtype)};
}

void check_scaled_mm_meta_op(at::IntArrayRef a, at::ScalarType a_dtype, at::Device a_device, at::IntArrayRef b,
                             at::ScalarType b_dtype, at::Device b_device, at::IntArrayRef scale_a,
                             at::ScalarType scale_a_dtype, at::Device scale_a_device, at::IntArrayRef scale_b,
                             at::ScalarType scale_b_dtype, at::Device scale_b_device, at::OptionalIntArrayRef bias,
                             std::optional<at::ScalarType> bias_dtype, std::optional<at::Device> bias_device,
                             std::optional<at::ScalarType> out_dtype) {
  std::optional<TensorMeta> bias_meta;
  if (bias.has_value()) bias_meta = operand_meta(*bias, bias_dtype.value(), bias_device.value());
  check_scaled_mm_meta(operand_meta(a, a_dtype, a_device), operand_meta(b, b_dtype, b_device),
                       operand_meta(scale_a, scale_a_dtype, scale_a_device),
                       operand_meta(scale_b, scale_b_dtype, scale_b_device), bias_meta, out_dtype);
}

// quantize_rowwise's validation on metadata alone, for its fake implementation (python/fp8ext/quantize.py).
void check_quantize_rowwise_meta_op(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType x_dtype,
                                    std::optional<at::ScalarType> dtype, std::optional<double> scale_ub) {
  check_quantize_rowwise(sizes, strides, x_dtype, dtype, scale_ub);
}

// The autotune cache file, in every build (a CPU-only one included) so that python/fp8ext/autotune.py reads it
// and the tests exercise the tuner's own writer without a GPU. Returns (why the file is unusable or "",
// [bucket0, kernel0, bucket1, kernel1, ...]); a missing file is no error and has no entries.
std::tuple<std::string, std::vector<std::string>> autotune_cache_read(const std::string& path) {
  const sm90::CacheRead r = sm90::read_cache(path);
  std::vector<std::string> flat;
  for (const auto& [bucket, kernel] : r.entries) {
    flat.push_back(bucket);
    flat.push_back(kernel);
  }
  return {r.error, flat};
}

// Merges the entries into the file as the tuner does after a new choice; returns "" or what failed.
std::string autotune_cache_write(const std::string& path, const std::vector<std::string>& buckets,
                                 const std::vector<std::string>& kernels) {
  TORCH_CHECK(buckets.size() == kernels.size(), "fp8ext.autotune: ", buckets.size(), " buckets but ",
              kernels.size(), " kernel names");
  sm90::CacheEntries entries;
  for (size_t i = 0; i < buckets.size(); ++i) entries[buckets[i]] = kernels[i];
  return sm90::write_cache(path, entries);
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
      "ScalarType? out_dtype) -> ()",
      &check_scaled_mm_meta_op);
  m.def("quantize_rowwise(Tensor x, ScalarType? dtype=None, float? scale_ub=None) -> (Tensor, Tensor)");
  m.def(
      "_check_quantize_rowwise_meta(int[] sizes, int[] strides, ScalarType x_dtype, ScalarType? dtype, "
      "float? scale_ub) -> ()",
      &check_quantize_rowwise_meta_op);
  m.def("_autotune_cache_read(str path) -> (str, str[])", &autotune_cache_read);
  m.def("_autotune_cache_write(str path, str[] buckets, str[] kernels) -> str", &autotune_cache_write);
}

TORCH_LIBRARY_IMPL(fp8ext, CPU, m) { m.impl("scaled_mm", &scaled_mm_cpu); }

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
