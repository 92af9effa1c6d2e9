// Element types. Enum values equal ONNX TensorProto.DataType so conversion is a cast
// at the importer boundary, but nothing outside src/onnx depends on that.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace kiln {

enum class DataType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
  // Low-precision types (see "low-precision types" below). Stored unpacked, one byte per
  // element; 4-bit and 2-bit values are packed only at the TensorProto boundary.
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
};

// IEEE binary16. Arithmetic happens in float (see compute_t).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(from_float(f)) {}
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
    uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
};

size_t dtype_size(DataType dt);
const char* dtype_name(DataType dt);      // "float32", "int64", ...
bool dtype_from_name(const std::string& name, DataType* out);
bool is_float(DataType dt);               // float16/bfloat16/float32/float64
bool is_signed_int(DataType dt);
bool is_unsigned_int(DataType dt);
inline bool is_integer(DataType dt) { return is_signed_int(dt) || is_unsigned_int(dt); }
bool is_supported_dtype(DataType dt);     // a dtype kiln tensors can hold

// ---- low-precision types ----
// In memory every low-precision element is one byte: the fp8/fp4/e8m0 floats hold their
// bit pattern (fp4 in the low nibble), int4/int2 hold the value as a sign-extended int8,
// uint4/uint2 as a uint8. They are not part of dispatch_all: arithmetic kernels reject
// them; Cast, the quantization ops and byte-copying data movement handle them.
bool is_low_precision(DataType dt);        // any of the types above
bool is_low_precision_float(DataType dt);  // fp8 (4 kinds), fp4 e2m1, e8m0
bool is_low_precision_int(DataType dt);    // int4, uint4, int2, uint2
// Bits per element in TensorProto packing: 4 (int4/uint4/fp4), 2 (int2/uint2), else 0.
int packed_bits(DataType dt);
// Value range of int4/uint4/int2/uint2 (false for other types).
bool low_precision_int_range(DataType dt, int64_t* lo, int64_t* hi);
// Wraps an integer to int4/uint4/int2/uint2 (keeps the low bits, two's complement), as
// ONNX Cast does for integer-valued sources. Returns the stored byte.
uint8_t wrap_low_precision_int(DataType dt, int64_t v);
// Decodes an fp8/fp4/e8m0 bit pattern (exact). NaN keeps its sign where the format has one.
float low_precision_float_to_float(DataType dt, uint8_t bits);
// Encodes a value as fp8 (any of the 4 kinds) or fp4 e2m1, rounding to nearest even.
// saturate: out-of-range values and infinities become the largest finite value of the
// right sign; otherwise they become inf (E5M2) or NaN (the formats without inf). fp4 has
// neither inf nor NaN and always saturates (NaN becomes a zero, as the ONNX reference does).
uint8_t float_to_low_precision_float(DataType dt, double v, bool saturate);
// Encodes as float8e8m0 (a power of two 2^(e-127); 0xFF is NaN; the sign is ignored).
enum class E8M0Rounding { kUp, kDown, kNearest };
uint8_t float_to_e8m0(float v, bool saturate, E8M0Rounding mode);
// Reads a stored low-precision element as a double (exact).
double low_precision_to_double(DataType dt, uint8_t stored);

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct dtype_of<double> { static constexpr DataType value = DataType::kFloat64; };
template <> struct dtype_of<Half> { static constexpr DataType value = DataType::kFloat16; };
template <> struct dtype_of<BFloat16> { static constexpr DataType value = DataType::kBFloat16; };
template <> struct dtype_of<int8_t> { static constexpr DataType value = DataType::kInt8; };
template <> struct dtype_of<int16_t> { static constexpr DataType value = DataType::kInt16; };
template <> struct dtype_of<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct dtype_of<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct dtype_of<uint8_t> { static constexpr DataType value = DataType::kUInt8; };
template <> struct dtype_of<uint16_t> { static constexpr DataType value = DataType::kUInt16; };
template <> struct dtype_of<uint32_t> { static constexpr DataType value = DataType::kUInt32; };
template <> struct dtype_of<uint64_t> { static constexpr DataType value = DataType::kUInt64; };
template <> struct dtype_of<bool> { static constexpr DataType value = DataType::kBool; };

// The type reference kernels compute in: float for the 16-bit floats, T otherwise.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T> inline constexpr bool is_half_like_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T> inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_like_v<T>;

template <typename T>
inline compute_t<T> to_compute(T v) {
  if constexpr (is_half_like_v<T>) return static_cast<float>(v);
  else return v;
}
template <typename T, typename C>
inline T from_compute(C v) {
  if constexpr (is_half_like_v<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// Converts one element between any two supported types with ONNX Cast semantics
// (float->int truncates toward zero; NaN->bool is true; out-of-range is implementation defined).
template <typename To, typename From>
inline To convert_element(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_like_v<From>) {
    return convert_element<To>(static_cast<float>(v));
  } else if constexpr (is_half_like_v<To>) {
    if constexpr (std::is_same_v<From, bool>) return To(v ? 1.0f : 0.0f);
    else return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(v)) return To(0);
    // Saturate instead of UB on out-of-range values.
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v <= static_cast<From>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Calls fn.template operator()<T>() for the C++ type of dt. Returns false for an
// unsupported dtype (the caller turns that into an error naming the op).
#define KILN_DTYPE_CASE(DT, T) \
  case DataType::DT: fn.template operator()<T>(); return true;

template <typename Fn>
bool dispatch_all(DataType dt, Fn&& fn) {
  switch (dt) {
    KILN_DTYPE_CASE(kFloat32, float)
    KILN_DTYPE_CASE(kFloat64, double)
    KILN_DTYPE_CASE(kFloat16, Half)
    KILN_DTYPE_CASE(kBFloat16, BFloat16)
    KILN_DTYPE_CASE(kInt8, int8_t)
    KILN_DTYPE_CASE(kInt16, int16_t)
    KILN_DTYPE_CASE(kInt32, int32_t)
    KILN_DTYPE_CASE(kInt64, int64_t)
    KILN_DTYPE_CASE(kUInt8, uint8_t)
    KILN_DTYPE_CASE(kUInt16, uint16_t)
    KILN_DTYPE_CASE(kUInt32, uint32_t)
    KILN_DTYPE_CASE(kUInt64, uint64_t)
    KILN_DTYPE_CASE(kBool, bool)
    default: return false;
  }
}

// Numeric types: everything but bool.
template <typename Fn>
bool dispatch_numeric(DataType dt, Fn&& fn) {
  if (dt == DataType::kBool) return false;
  return dispatch_all(dt, std::forward<Fn>(fn));
}

template <typename Fn>
bool dispatch_float(DataType dt, Fn&& fn) {
  switch (dt) {
    KILN_DTYPE_CASE(kFloat32, float)
    KILN_DTYPE_CASE(kFloat64, double)
    KILN_DTYPE_CASE(kFloat16, Half)
    KILN_DTYPE_CASE(kBFloat16, BFloat16)
    default: return false;
  }
}

template <typename Fn>
bool dispatch_integer(DataType dt, Fn&& fn) {
  switch (dt) {
    KILN_DTYPE_CASE(kInt8, int8_t)
    KILN_DTYPE_CASE(kInt16, int16_t)
    KILN_DTYPE_CASE(kInt32, int32_t)
    KILN_DTYPE_CASE(kInt64, int64_t)
    KILN_DTYPE_CASE(kUInt8, uint8_t)
    KILN_DTYPE_CASE(kUInt16, uint16_t)
    KILN_DTYPE_CASE(kUInt32, uint32_t)
    KILN_DTYPE_CASE(kUInt64, uint64_t)
    default: return false;
  }
}

}  // namespace kiln
