// The ops' schemas, and the Python module that loads them. The backends register themselves: scaled_mm in
// scaled_mm_cpu.cpp and scaled_mm_cuda.cpp, quantize_rowwise in quantize_rowwise_op.cpp (CPU) and
// quantize_rowwise_cuda.cpp, quantize_blockwise (1 x 128 groups) likewise in quantize_blockwise_op.cpp and
// quantize_blockwise_cuda.cpp, linear in scaled_mm_cuda.cpp (CUDA; its CPU backend is the two ops in turn, in
// python/fp8ext/ops.py), the internal ops without tensors in internal_ops.cpp and scaled_mm_cuda.cpp. The
// fake (meta) implementations and the autograd guards (which refuse inputs that require grad: the ops have no
// backward) are Python, in python/fp8ext/ops.py and quantize.py: the stable ABI can neither read requires_grad
// nor redispatch below autograd.
#include <Python.h>

#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(fp8ext, m) {
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
}

// `import fp8ext._C` loads this library, which registers the ops above with the dispatcher. The module itself
// has no Python functions; it is built for Python's limited API (abi3), so one build serves every Python >= 3.10.
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fp8ext native ops (torch.ops.fp8ext)", -1,
                                          nullptr};
  return PyModule_Create(&module_def);
}
