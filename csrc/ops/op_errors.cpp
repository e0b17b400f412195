// The names in fp8ext's error messages (op_errors.h), in header-only torch types.
#include "ops/op_errors.h"

#include <cctype>

namespace fp8ext {

std::string dtype_name(ScalarType t) {
  using S = ScalarType;
  switch (t) {
    case S::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case S::Float8_e5m2: return "torch.float8_e5m2";
    case S::BFloat16: return "torch.bfloat16";
    case S::Half: return "torch.float16";
    case S::Float: return "torch.float32";
    case S::Double: return "torch.float64";
    case S::Byte: return "torch.uint8";
    case S::Char: return "torch.int8";
    case S::Short: return "torch.int16";
    case S::Int: return "torch.int32";
    case S::Long: return "torch.int64";
    case S::Bool: return "torch.bool";
    // c10 calls these ComplexHalf, ComplexFloat and ComplexDouble; Python users know torch's names.
    case S::ComplexHalf: return "torch.complex32";
    case S::ComplexFloat: return "torch.complex64";
    case S::ComplexDouble: return "torch.complex128";
    default: {
      std::string s = torch::headeronly::toString(t);
      for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      return "torch." + s;
    }
  }
}

std::string shape_str(IntSpan sizes) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "]";
  return os.str();
}

std::string device_str(DeviceMeta d) {
  using D = torch::headeronly::DeviceType;
  std::string name;
  switch (d.type) {
    case D::CPU: name = "cpu"; break;
    case D::CUDA: name = "cuda"; break;
    case D::Meta: name = "meta"; break;
    case D::MPS: name = "mps"; break;
    case D::XPU: name = "xpu"; break;
    case D::HIP: name = "hip"; break;
    default: name = "device" + std::to_string(static_cast<int>(d.type)); break;
  }
  return d.index < 0 ? name : name + ":" + std::to_string(d.index);
}

}  // namespace fp8ext
