// The fp8ext._C module's Python functions of a CUDA build: the direct launch of eager row-wise calls
// (direct_launch.cpp). The ops themselves are registered with the dispatcher, not here.
#pragma once

#include <Python.h>

namespace fp8ext {

extern PyMethodDef kModuleMethods[];

}  // namespace fp8ext
