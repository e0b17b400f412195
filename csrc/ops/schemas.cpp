// Every op's schema, and the Python module that loads them. The backends register themselves beside their code:
//
//   scaled_mm            CPU: reference/scaled_mm_cpu.cpp; CUDA: scaled_mm_cuda.cpp (the routing)
//   scaled_grouped_mm    CPU: reference/scaled_grouped_mm_cpu.cpp; CUDA: scaled_grouped_mm_cuda.cpp; and
//   scaled_grouped_mm_masked likewise
//   linear               CUDA: linear_cuda.cpp; its CPU backend is the two ops in turn (python/fp8ext/ops.py)
//   quantize_rowwise     CPU: quantize/quantize_rowwise_op.cpp; CUDA: quantize/quantize_rowwise_cuda.cpp
//   quantize_blockwise   (1 x 128 groups) likewise, quantize/quantize_blockwise_op.cpp and _cuda.cpp
//   silu_mul_quantize_rowwise  CUDA: quantize/quantize_rowwise_cuda.cpp; CPU: torch's silu and mul, then
//                        quantize_rowwise (python/fp8ext/quantize.py)
//   moe_dispatch, moe_combine  CUDA: moe/moe_routing_cuda.cpp; CPU: torch ops (python/fp8ext/moe_routing.py)
//   _check_*_meta        meta_checks.cpp, in every build
//   _autotune_cache_*    autotune_cache_ops.cpp, in every build
//   the other internal ops, in CUDA builds only: introspection.cpp, and _testing_fault in testing_hooks.cpp
//
// The fake (meta) implementations and the autograd guards (which refuse inputs that require grad: the ops have no
// backward) are Python, in python/fp8ext/ops.py and quantize.py: the stable ABI can neither read requires_grad
// nor redispatch below autograd.
#include <Python.h>

#include <torch/csrc/stable/library.h>

#ifdef FP8EXT_WITH_CUDA
#include "ops/direct_launch.h"
#endif

STABLE_TORCH_LIBRARY(fp8ext, m) {
  m.def(
      "scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
  m.def(
      "_check_scaled_mm_meta(int[] a, ScalarType a_dtype, Device a_device, int[] b, ScalarType b_dtype, "
      "Device b_device, int[] scale_a, ScalarType scale_a_dtype, Device scale_a_device, int[] scale_b, "
      "ScalarType scale_b_dtype, Device scale_b_device, int[]? bias, ScalarType? bias_dtype, Device? bias_device, "
      "ScalarType? out_dtype) -> ()");
  m.def(
      "scaled_grouped_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? offs=None, Tensor? bias=None, "
      "ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor");
  m.def(
      "_check_scaled_grouped_mm_meta(int[] a, ScalarType a_dtype, Device a_device, int[] b, ScalarType b_dtype, "
      "Device b_device, int[] scale_a, ScalarType scale_a_dtype, Device scale_a_device, int[] scale_b, "
      "ScalarType scale_b_dtype, Device scale_b_device, int[]? offs, ScalarType? offs_dtype, Device? offs_device, "
      "int[]? bias, ScalarType? bias_dtype, Device? bias_device, ScalarType? out_dtype, int[]? masked_m=None, "
      "ScalarType? masked_m_dtype=None, Device? masked_m_device=None, int? expected_m=None) -> ()");
  m.def(
      "scaled_grouped_mm_masked(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor masked_m, "
      "Tensor? bias=None, ScalarType? out_dtype=None, bool use_fast_accum=False, int? expected_m=None) -> Tensor");
  m.def("quantize_rowwise(Tensor x, ScalarType? dtype=None, float? scale_ub=None) -> (Tensor, Tensor)");
  m.def(
      "_check_quantize_rowwise_meta(int[] sizes, int[] strides, ScalarType x_dtype, ScalarType? dtype, "
      "float? scale_ub) -> ()");
  m.def("silu_mul_quantize_rowwise(Tensor x) -> (Tensor, Tensor)");
  m.def("_check_silu_mul_quantize_meta(int[] sizes, int[] strides, ScalarType x_dtype) -> ()");
  m.def("moe_dispatch(Tensor x, Tensor top_k_index, int num_experts) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "_check_moe_dispatch_meta(int[] x, ScalarType x_dtype, Device x_device, int[] top_k_index, "
      "ScalarType top_k_index_dtype, Device top_k_index_device, int num_experts) -> ()");
  m.def("moe_combine(Tensor o, Tensor pos, Tensor weights) -> Tensor");
  m.def(
      "_check_moe_combine_meta(int[] o, ScalarType o_dtype, Device o_device, int[] pos, ScalarType pos_dtype, "
      "Device pos_device, int[] weights, ScalarType weights_dtype, Device weights_device) -> ()");
  m.def("quantize_blockwise(Tensor x, ScalarType? dtype=None) -> (Tensor, Tensor)");
  m.def("_check_quantize_blockwise_meta(int[] sizes, int[] strides, ScalarType x_dtype, ScalarType? dtype) -> ()");
  m.def(
      "linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None, bool use_fast_accum=True) -> Tensor");
  m.def(
      "_check_linear_meta(int[] x, ScalarType x_dtype, Device x_device, int[] weight, ScalarType weight_dtype, "
      "Device weight_device, int[] weight_scale, ScalarType weight_scale_dtype, Device weight_scale_device, "
      "int[]? bias, ScalarType? bias_dtype, Device? bias_device) -> ()");
  m.def("_autotune_cache_read(str path) -> (str, str[])");
  m.def("_autotune_cache_write(str path, str[] buckets, str[] kernels) -> str");
#ifdef FP8EXT_WITH_CUDA
  // Defined only where they are implemented: python/fp8ext tells a build with CUDA kernels by _kernel_names.
  m.def("_kernel_names() -> str[]");
  m.def(
      "_scaled_mm_with_kernel(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
      "ScalarType? out_dtype, bool use_fast_accum, str kernel) -> Tensor");
  m.def("_force_kernel(str name) -> ()");
  m.def("_forced_kernel() -> str");
  m.def("_testing_fault(str fault) -> ()");
  m.def(
      "_selected_kernel(int M, int N, int K, ScalarType out_dtype, bool use_fast_accum, "
      "ScalarType a_dtype, bool capturing=False, bool torch_ok=True) -> str");
  m.def(
      "_rank_kernels(int M, int N, int K, ScalarType out_dtype, bool use_fast_accum, ScalarType a_dtype, "
      "bool capturing=False) -> str[]");
  m.def("_kernel_traits() -> str[]");
  m.def("_cost_terms(str choice, int M, int N, int K, ScalarType out_dtype) -> float[]");
  m.def("_cost_coefficients() -> str[]");
  m.def("_set_backends(str backends) -> ()");
  m.def("_backends() -> str");
  m.def("_set_software_key(str key) -> ()");
  m.def("_autotune_configure(bool enabled, str cache_file, str[] buckets, str[] kernels) -> ()");
  m.def("_autotune_entries() -> str[]");
  m.def("_blockwise_kernel_names() -> str[]");
  m.def("_grouped_kernel_names() -> str[]");
  m.def(
      "_scaled_grouped_mm_with_kernel(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? offs, Tensor? bias, "
      "ScalarType? out_dtype, bool use_fast_accum, str kernel, Tensor? masked_m=None) -> Tensor");
  m.def("_selected_blockwise_kernel(int M, int N, int K, ScalarType out_dtype, int sm_count, bool capturing=False, "
        "float[] fits=[], float[] residuals=[], bool torch_ok=True, float kernel_advantage=-1.0, "
        "int backstop_above_m=-1) -> str");
  m.def("_blockwise_work(str name, int M, int N, int K, int sm_count) -> float[]");
#endif
}

// `import fp8ext._C` loads this library, which registers the ops above with the dispatcher. The module's own
// functions are the direct launch of a CUDA build (direct_launch.cpp); it is built for Python's limited API (abi3),
// so one build serves every Python >= 3.10.
PyMODINIT_FUNC PyInit__C(void) {
#ifdef FP8EXT_WITH_CUDA
  PyMethodDef* methods = fp8ext::kModuleMethods;
#else
  PyMethodDef* methods = nullptr;
#endif
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fp8ext native ops (torch.ops.fp8ext)", -1,
                                          methods};
  return PyModule_Create(&module_def);
}
