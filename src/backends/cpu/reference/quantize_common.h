// Helpers shared by the quantization kernels (quantize.cpp, qlinear.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/reference/kernel.h"

namespace kiln::quant {

// True for a dtype whose elements read_as_double can read (dispatch_all types and the
// low-precision types).
inline bool readable(DataType dt) {
  bool ok = dispatch_all(dt, [&]<typename T>() {});
  return ok || is_low_precision(dt);
}

// Element i of t as a double (exact for every readable type but 64-bit ints beyond 2^53).
inline double element_as_double(const Tensor& t, int64_t i) {
  if (is_low_precision(t.dtype())) return low_precision_to_double(t.dtype(), t.data<uint8_t>()[i]);
  double out = 0;
  dispatch_all(t.dtype(), [&]<typename T>() { out = convert_element<double>(t.data<T>()[i]); });
  return out;
}

inline std::vector<double> read_as_double(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) v[static_cast<size_t>(i)] = element_as_double(t, i);
  return v;
}

// Rounds v to the precision of float dtype dt (float16, bfloat16, float32; double unchanged).
inline double round_to(DataType dt, double v) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<float>(v);
    case DataType::kFloat16: return static_cast<float>(Half(static_cast<float>(v)));
    case DataType::kBFloat16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    default: return v;
  }
}

// numpy's result type for arithmetic between two (float or int32) arrays.
inline DataType promote(DataType a, DataType b) {
  if (a == b) return a;
  if (a == DataType::kFloat64 || b == DataType::kFloat64) return DataType::kFloat64;
  if (!is_float(a) || !is_float(b)) return DataType::kFloat64;  // int32 with a float
  return DataType::kFloat32;
}

// Integer range of a quantized integer type.
inline bool int_range(DataType dt, int64_t* lo, int64_t* hi) {
  switch (dt) {
    case DataType::kInt8: *lo = -128; *hi = 127; return true;
    case DataType::kUInt8: *lo = 0; *hi = 255; return true;
    case DataType::kInt16: *lo = -32768; *hi = 32767; return true;
    case DataType::kUInt16: *lo = 0; *hi = 65535; return true;
    case DataType::kInt32: *lo = INT32_MIN; *hi = INT32_MAX; return true;
    default: return low_precision_int_range(dt, lo, hi);
  }
}

// Stores an integer value (already in range) as element i of t (an int_range type).
inline void store_int(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DataType::kInt8: t.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt16: t.data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DataType::kUInt16: t.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    case DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    default: t.data<uint8_t>()[i] = wrap_low_precision_int(t.dtype(), v); break;
  }
}

// Rounds half to even and clamps into [lo, hi]; NaN maps to lo (as the ONNX reference does).
inline int64_t round_clamp(double v, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return lo;
  double r = std::nearbyint(v);
  if (r <= static_cast<double>(lo)) return lo;
  if (r >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(r);
}

}  // namespace kiln::quant
