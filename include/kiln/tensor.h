// Host tensors and DataType for the public API (definitions in core/tensor.h, core/dtype.h).
#pragma once
#include "core/dtype.h"
#include "core/tensor.h"
