#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

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
    default: return is_low_precision(dt) ? 1 : 0;  // stored unpacked, one byte per element
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
    {DataType::kFloat8E4M3FN, "float8e4m3fn"}, {DataType::kFloat8E4M3FNUZ, "float8e4m3fnuz"},
    {DataType::kFloat8E5M2, "float8e5m2"}, {DataType::kFloat8E5M2FNUZ, "float8e5m2fnuz"},
    {DataType::kUInt4, "uint4"}, {DataType::kInt4, "int4"}, {DataType::kFloat4E2M1, "float4e2m1"},
    {DataType::kFloat8E8M0, "float8e8m0"}, {DataType::kUInt2, "uint2"}, {DataType::kInt2, "int2"},
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
bool is_supported_dtype(DataType dt) { return dtype_size(dt) != 0 || dt == DataType::kString; }

// ---- low-precision types ----

bool is_low_precision_float(DataType dt) {
  switch (dt) {
    case DataType::kFloat8E4M3FN: case DataType::kFloat8E4M3FNUZ: case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ: case DataType::kFloat4E2M1: case DataType::kFloat8E8M0:
      return true;
    default:
      return false;
  }
}

bool is_low_precision_int(DataType dt) {
  return dt == DataType::kInt4 || dt == DataType::kUInt4 || dt == DataType::kInt2 || dt == DataType::kUInt2;
}

bool is_low_precision(DataType dt) { return is_low_precision_float(dt) || is_low_precision_int(dt); }

int packed_bits(DataType dt) {
  switch (dt) {
    case DataType::kInt4: case DataType::kUInt4: case DataType::kFloat4E2M1: return 4;
    case DataType::kInt2: case DataType::kUInt2: return 2;
    default: return 0;
  }
}

bool low_precision_int_range(DataType dt, int64_t* lo, int64_t* hi) {
  switch (dt) {
    case DataType::kInt4: *lo = -8; *hi = 7; return true;
    case DataType::kUInt4: *lo = 0; *hi = 15; return true;
    case DataType::kInt2: *lo = -2; *hi = 1; return true;
    case DataType::kUInt2: *lo = 0; *hi = 3; return true;
    default: return false;
  }
}

uint8_t wrap_low_precision_int(DataType dt, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  switch (dt) {
    case DataType::kInt4: return static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>((u & 0xF) ^ 0x8) - 8));
    case DataType::kUInt4: return static_cast<uint8_t>(u & 0xF);
    case DataType::kInt2: return static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>((u & 0x3) ^ 0x2) - 2));
    case DataType::kUInt2: return static_cast<uint8_t>(u & 0x3);
    default: return 0;
  }
}

namespace {

// The fp8 / fp4 formats: exponent and mantissa widths, bias, largest finite value, and how
// NaN/inf are encoded.
enum class FpKind { kE4M3FN, kFNUZ, kE5M2, kFP4 };
struct FpSpec {
  int ebits, mbits, bias;
  double max;
  FpKind kind;
};

bool fp_spec(DataType dt, FpSpec* s) {
  switch (dt) {
    case DataType::kFloat8E4M3FN: *s = {4, 3, 7, 448.0, FpKind::kE4M3FN}; return true;
    case DataType::kFloat8E4M3FNUZ: *s = {4, 3, 8, 240.0, FpKind::kFNUZ}; return true;
    case DataType::kFloat8E5M2: *s = {5, 2, 15, 57344.0, FpKind::kE5M2}; return true;
    case DataType::kFloat8E5M2FNUZ: *s = {5, 2, 16, 57344.0, FpKind::kFNUZ}; return true;
    case DataType::kFloat4E2M1: *s = {2, 1, 1, 6.0, FpKind::kFP4}; return true;
    default: return false;
  }
}

}  // namespace

float low_precision_float_to_float(DataType dt, uint8_t bits) {
  if (dt == DataType::kFloat8E8M0) {
    if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, static_cast<int>(bits) - 127);
  }
  FpSpec s;
  if (!fp_spec(dt, &s)) return 0.0f;
  const int width = s.ebits + s.mbits;
  bool neg = (bits >> width) & 1;
  int exp = (bits >> s.mbits) & ((1 << s.ebits) - 1);
  int mant = bits & ((1 << s.mbits) - 1);
  float nan = neg ? -std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::quiet_NaN();
  if (s.kind == FpKind::kFNUZ && bits == 0x80) return -std::numeric_limits<float>::quiet_NaN();  // as ml_dtypes
  if (s.kind == FpKind::kE4M3FN && exp == 15 && mant == 7) return nan;
  if (s.kind == FpKind::kE5M2 && exp == 31) {
    if (mant != 0) return nan;
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  double v = exp == 0 ? std::ldexp(static_cast<double>(mant), 1 - s.bias - s.mbits)
                      : std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -s.mbits), exp - s.bias);
  return static_cast<float>(neg ? -v : v);
}

uint8_t float_to_low_precision_float(DataType dt, double v, bool saturate) {
  if (dt == DataType::kFloat8E8M0) {
    return float_to_e8m0(static_cast<float>(v), saturate, E8M0Rounding::kUp);
  }
  FpSpec s;
  if (!fp_spec(dt, &s)) return 0;
  const int width = s.ebits + s.mbits;
  const bool neg = std::signbit(v);
  const uint8_t sign = neg ? static_cast<uint8_t>(1u << width) : 0;
  const uint8_t max_bits = s.kind == FpKind::kE4M3FN ? 0x7E : s.kind == FpKind::kE5M2 ? 0x7B
                         : s.kind == FpKind::kFNUZ ? 0x7F : 0x7;
  auto overflow = [&]() -> uint8_t {
    if (saturate || s.kind == FpKind::kFP4) return static_cast<uint8_t>(sign | max_bits);
    if (s.kind == FpKind::kE4M3FN) return static_cast<uint8_t>(sign | 0x7F);
    if (s.kind == FpKind::kE5M2) return static_cast<uint8_t>(sign | 0x7C);
    return 0x80;  // FNUZ NaN
  };
  if (std::isnan(v)) {
    switch (s.kind) {
      case FpKind::kE4M3FN: return static_cast<uint8_t>(sign | 0x7F);
      case FpKind::kE5M2: return static_cast<uint8_t>(sign | 0x7E);
      case FpKind::kFNUZ: return 0x80;
      case FpKind::kFP4: return neg ? 0x0 : 0x8;  // what ml_dtypes (the ONNX reference) produces
    }
  }
  double a = std::fabs(v);
  if (std::isinf(a)) return overflow();
  auto zero = [&]() -> uint8_t { return s.kind == FpKind::kFNUZ ? 0 : sign; };
  if (a == 0) return zero();
  int e2;
  std::frexp(a, &e2);
  int e = e2 - 1;  // a = 1.x * 2^e
  const int emin = 1 - s.bias;
  if (e < emin) e = emin;
  const double quantum = std::ldexp(1.0, e - s.mbits);
  double n = std::nearbyint(a / quantum);  // round half to even (default rounding mode)
  if (n * quantum > s.max) return overflow();
  if (n == 0) return zero();
  const double implicit = std::ldexp(1.0, s.mbits);
  if (n >= 2 * implicit) {  // rounding carried into the next binade
    n /= 2;
    ++e;
  }
  uint32_t biased = 0, mant;
  if (n >= implicit) {
    biased = static_cast<uint32_t>(e + s.bias);
    mant = static_cast<uint32_t>(n - implicit);
  } else {
    mant = static_cast<uint32_t>(n);  // subnormal
  }
  return static_cast<uint8_t>(sign | (biased << s.mbits) | mant);
}

uint8_t float_to_e8m0(float v, bool saturate, E8M0Rounding mode) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  uint32_t exp = (u >> 23) & 0xFF;
  if (exp == 0xFF) return 0xFF;  // NaN and inf
  bool round_up = false;
  if (mode == E8M0Rounding::kNearest) {
    bool g = u & 0x400000, r = u & 0x200000, sticky = u & 0x1FFFFF, lsb = exp > 0;
    round_up = g && (r || sticky || lsb);
  } else if (mode == E8M0Rounding::kUp) {
    round_up = (u & 0x7FFFFF) != 0;
  }
  if (round_up && saturate && exp == 0xFE) round_up = false;
  return static_cast<uint8_t>(exp + (round_up ? 1 : 0));
}

double low_precision_to_double(DataType dt, uint8_t stored) {
  if (dt == DataType::kInt4 || dt == DataType::kInt2) return static_cast<int8_t>(stored);
  if (dt == DataType::kUInt4 || dt == DataType::kUInt2) return stored;
  return low_precision_float_to_float(dt, stored);
}

}  // namespace kiln
