#include "core/dtype.h"

#include <cstring>

namespace kiln {

uint16_t Half::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7FFFFFFF;
  if (absx >= 0x7F800000) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7C00 | (absx > 0x7F800000 ? 0x200 | ((absx >> 13) & 0x3FF) : 0));
  }
  if (absx >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to inf
  if (absx < 0x38800000) {  // subnormal half or zero
    if (absx < 0x33000000) return static_cast<uint16_t>(sign);  // below half of smallest subnormal
    uint32_t mant = (absx & 0x7FFFFF) | 0x800000;
    int shift = 113 - static_cast<int>(absx >> 23) + 13;  // 126 - exp + 14 - 1 ... aligns to 10-bit mantissa
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t exp = (absx >> 23) - 112;
  uint32_t mant = absx & 0x7FFFFF;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

float Half::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
      x = sign | static_cast<uint32_t>(112 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    x = sign | 0x7F800000 | (mant << 13);
  } else {
    x = sign | (exp + 112) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

size_t dtype_size(DataType dt) {
  switch (dt) {
    case DataType::kFloat32: case DataType::kInt32: case DataType::kUInt32: return 4;
    case DataType::kFloat64: case DataType::kInt64: case DataType::kUInt64: return 8;
    case DataType::kFloat16: case DataType::kBFloat16: case DataType::kInt16: case DataType::kUInt16: return 2;
    case DataType::kInt8: case DataType::kUInt8: case DataType::kBool: return 1;
    default: return 0;
  }
}

namespace {
struct NameEntry { DataType dt; const char* name; };
constexpr NameEntry kNames[] = {
    {DataType::kFloat32, "float32"}, {DataType::kFloat64, "float64"}, {DataType::kFloat16, "float16"},
    {DataType::kBFloat16, "bfloat16"}, {DataType::kInt8, "int8"}, {DataType::kInt16, "int16"},
    {DataType::kInt32, "int32"}, {DataType::kInt64, "int64"}, {DataType::kUInt8, "uint8"},
    {DataType::kUInt16, "uint16"}, {DataType::kUInt32, "uint32"}, {DataType::kUInt64, "uint64"},
    {DataType::kBool, "bool"}, {DataType::kString, "string"},
};
}  // namespace

const char* dtype_name(DataType dt) {
  for (const auto& e : kNames) if (e.dt == dt) return e.name;
  return "undefined";
}

bool dtype_from_name(const std::string& name, DataType* out) {
  for (const auto& e : kNames) {
    if (name == e.name) { *out = e.dt; return true; }
  }
  return false;
}

bool is_float(DataType dt) {
  return dt == DataType::kFloat32 || dt == DataType::kFloat64 || dt == DataType::kFloat16 || dt == DataType::kBFloat16;
}
bool is_signed_int(DataType dt) {
  return dt == DataType::kInt8 || dt == DataType::kInt16 || dt == DataType::kInt32 || dt == DataType::kInt64;
}
bool is_unsigned_int(DataType dt) {
  return dt == DataType::kUInt8 || dt == DataType::kUInt16 || dt == DataType::kUInt32 || dt == DataType::kUInt64;
}
bool is_supported_dtype(DataType dt) { return dtype_size(dt) != 0; }

}  // namespace kiln
