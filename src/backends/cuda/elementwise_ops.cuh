// Device functions of the elementwise ops, shared by the nvcc-compiled generic kernels
// (elementwise.cu) and the NVRTC kernels of FusedElementwise (fused_elementwise.cpp).
//
// The text between KILN_EW_OPS( ... ) is used twice:
//   elementwise.cu        #define KILN_EW_OPS(...) __VA_ARGS__      (compiled by nvcc)
//   fused_elementwise.cpp #define KILN_EW_OPS(...) #__VA_ARGS__     (a string for NVRTC)
// so it must not contain preprocessor directives or '#' characters, must not include any
// header (NVRTC sees no system headers) and must not depend on cuda_fp16.h: float16 and
// bfloat16 are handled as unsigned short bit patterns.
//
// Semantics follow the CPU reference kernels (backends/cpu/reference/elementwise*.cpp)
// term for term: float16/bfloat16/float32 compute in float; integers compute in 64 bits
// with wrap-around and are normalized to their dtype's width (kew_norm) when stored; bool
// is an integer 0/1. Dtype codes are kiln::DataType values (ONNX TensorProto codes).
//
// This file has no include guard on purpose: each user includes it exactly once.

KILN_EW_OPS(

enum {
  KEW_F32 = 1, KEW_U8 = 2, KEW_I8 = 3, KEW_U16 = 4, KEW_I16 = 5, KEW_I32 = 6, KEW_I64 = 7,
  KEW_BOOL = 9, KEW_F16 = 10, KEW_F64 = 11, KEW_U32 = 12, KEW_BF16 = 16
};

// ---- float16 / bfloat16 bit patterns <-> float ----
__device__ __forceinline__ float kew_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short kew_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float kew_b2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
// Round to nearest even; NaN keeps its payload's top bits and is made quiet (like kiln::BFloat16).
__device__ __forceinline__ unsigned short kew_f2b(float f) {
  unsigned int u = __float_as_uint(f);
  if (f != f) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- loads and stores by dtype (dt is a compile-time constant in NVRTC kernels) ----
__device__ __forceinline__ bool kew_is_float_dt(int dt) {
  return dt == KEW_F32 || dt == KEW_F16 || dt == KEW_BF16 || dt == KEW_F64;
}
// Float dtypes as float.
__device__ __forceinline__ float kew_ldf(const void* p, int dt, long long i) {
  switch (dt) {
    case KEW_F16: return kew_h2f(((const unsigned short*)p)[i]);
    case KEW_BF16: return kew_b2f(((const unsigned short*)p)[i]);
    case KEW_F64: return (float)((const double*)p)[i];
    default: return ((const float*)p)[i];
  }
}
// Integer and bool dtypes as a 64-bit integer (sign- or zero-extended; bool 0/1).
__device__ __forceinline__ long long kew_ldi(const void* p, int dt, long long i) {
  switch (dt) {
    case KEW_U8: return (long long)((const unsigned char*)p)[i];
    case KEW_I8: return (long long)((const signed char*)p)[i];
    case KEW_U16: return (long long)((const unsigned short*)p)[i];
    case KEW_I16: return (long long)((const short*)p)[i];
    case KEW_I32: return (long long)((const int*)p)[i];
    case KEW_U32: return (long long)((const unsigned int*)p)[i];
    case KEW_BOOL: return ((const unsigned char*)p)[i] != 0 ? 1 : 0;
    default: return ((const long long*)p)[i];
  }
}
// Any dtype as a double (exact for the floats; integers convert like static_cast<double>).
__device__ __forceinline__ double kew_ldd(const void* p, int dt, long long i) {
  if (dt == KEW_F64) return ((const double*)p)[i];
  if (kew_is_float_dt(dt)) return (double)kew_ldf(p, dt, i);
  return (double)kew_ldi(p, dt, i);
}
__device__ __forceinline__ void kew_stf(void* p, int dt, long long i, float v) {
  switch (dt) {
    case KEW_F16: ((unsigned short*)p)[i] = kew_f2h(v); break;
    case KEW_BF16: ((unsigned short*)p)[i] = kew_f2b(v); break;
    default: ((float*)p)[i] = v; break;
  }
}
__device__ __forceinline__ void kew_sti(void* p, int dt, long long i, long long v) {
  switch (dt) {
    case KEW_U8: case KEW_I8: ((unsigned char*)p)[i] = (unsigned char)v; break;
    case KEW_U16: case KEW_I16: ((unsigned short*)p)[i] = (unsigned short)v; break;
    case KEW_I32: case KEW_U32: ((unsigned int*)p)[i] = (unsigned int)v; break;
    case KEW_BOOL: ((unsigned char*)p)[i] = v != 0 ? 1 : 0; break;
    default: ((long long*)p)[i] = v; break;
  }
}

// An integer wrapped to dtype dt's width and extended back (what storing and reloading gives).
__device__ __forceinline__ long long kew_norm(long long v, int dt) {
  switch (dt) {
    case KEW_U8: return (long long)(unsigned char)v;
    case KEW_I8: return (long long)(signed char)v;
    case KEW_U16: return (long long)(unsigned short)v;
    case KEW_I16: return (long long)(short)v;
    case KEW_I32: return (long long)(int)v;
    case KEW_U32: return (long long)(unsigned int)v;
    case KEW_BOOL: return v != 0 ? 1 : 0;
    default: return v;
  }
}
// A float rounded to dtype dt's precision (what storing and reloading gives).
__device__ __forceinline__ float kew_round(float v, int dt) {
  if (dt == KEW_F16) return kew_h2f(kew_f2h(v));
  if (dt == KEW_BF16) return kew_b2f(kew_f2b(v));
  return v;
}

// ---- Cast semantics (kiln::convert_element) ----
// A float value (src is a float dtype, exactly held in d) or an integer value (i) converted
// to float dtype dt and returned as float (f64 targets are not computed in float).
__device__ __forceinline__ float kew_conv_f(bool src_float, double d, long long i, int dt) {
  float f = src_float ? (float)d : (float)i;
  return kew_round(f, dt);
}
// Float -> integer: NaN gives 0, out-of-range values saturate, the rest truncate.
__device__ __forceinline__ long long kew_d2i(double d, int dt) {
  if (dt == KEW_BOOL) return d != 0.0 ? 1 : 0;  // NaN gives true
  if (d != d) return 0;
  double lo, hi;
  long long ilo, ihi;
  switch (dt) {
    case KEW_U8: lo = 0.0; hi = 255.0; ilo = 0; ihi = 255; break;
    case KEW_I8: lo = -128.0; hi = 127.0; ilo = -128; ihi = 127; break;
    case KEW_U16: lo = 0.0; hi = 65535.0; ilo = 0; ihi = 65535; break;
    case KEW_I16: lo = -32768.0; hi = 32767.0; ilo = -32768; ihi = 32767; break;
    case KEW_I32: lo = -2147483648.0; hi = 2147483647.0; ilo = -2147483647LL - 1; ihi = 2147483647LL; break;
    case KEW_U32: lo = 0.0; hi = 4294967295.0; ilo = 0; ihi = 4294967295LL; break;
    default: lo = -9223372036854775808.0; hi = 9223372036854775807.0; ilo = -9223372036854775807LL - 1; ihi = 9223372036854775807LL; break;
  }
  if (d >= hi) return ihi;
  if (d <= lo) return ilo;
  return (long long)d;
}
__device__ __forceinline__ long long kew_conv_i(bool src_float, double d, long long i, int dt) {
  if (src_float) return kew_d2i(d, dt);
  return kew_norm(i, dt);
}

// ---- float unary ops (float in, float out) ----
__device__ __forceinline__ float kew_nan_f() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ float kew_inf_f() { return __int_as_float(0x7f800000); }
// std::max(C(0), v) and std::min(C(0), v) with their NaN behaviour (NaN gives 0).
__device__ __forceinline__ float kew_max0(float v) { return (0.0f < v) ? v : 0.0f; }
__device__ __forceinline__ float kew_min0(float v) { return (v < 0.0f) ? v : 0.0f; }
__device__ __forceinline__ float kew_min1(float v) { return (v < 1.0f) ? v : 1.0f; }
__device__ __forceinline__ float kew_sign_f(float v) {
  if (v != v) return v;
  return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f);
}
__device__ __forceinline__ float kew_relu_f(float v) {
  if (v != v) return v;
  return v > 0.0f ? v : 0.0f;
}
__device__ __forceinline__ float kew_leaky_relu_f(float v, float a) { return v < 0.0f ? a * v : v; }
__device__ __forceinline__ float kew_elu_f(float v, float a) { return v < 0.0f ? a * expm1f(v) : v; }
__device__ __forceinline__ float kew_selu_f(float v, float a, float g) { return v > 0.0f ? g * v : g * (a * expf(v) - a); }
__device__ __forceinline__ float kew_celu_f(float v, float a) { return kew_max0(v) + kew_min0(a * expm1f(v / a)); }
__device__ __forceinline__ float kew_thresholded_relu_f(float v, float a) { return v > a ? v : 0.0f; }
__device__ __forceinline__ float kew_sigmoid_f(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
  float e = expf(v);
  return e / (1.0f + e);
}
__device__ __forceinline__ float kew_hard_sigmoid_f(float v, float a, float b) { return kew_max0(kew_min1(a * v + b)); }
__device__ __forceinline__ float kew_hard_swish_f(float v) { return v * kew_max0(kew_min1(v / 6.0f + 0.5f)); }
__device__ __forceinline__ float kew_gelu_f(float v) { return 0.5f * v * (1.0f + erff(v / 1.41421356237309504880f)); }
__device__ __forceinline__ float kew_gelu_tanh_f(float v) {
  const float k = sqrtf(2.0f / 3.14159265358979323846f);
  return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}
__device__ __forceinline__ float kew_softplus_f(float v) { return v > 0.0f ? v + log1pf(expf(-v)) : log1pf(expf(v)); }
__device__ __forceinline__ float kew_softsign_f(float v) { return v / (1.0f + fabsf(v)); }
__device__ __forceinline__ float kew_mish_f(float v) { return v * tanhf(kew_softplus_f(v)); }
__device__ __forceinline__ float kew_swish_f(float v, float a) { return v * kew_sigmoid_f(a * v); }
// Shrink computes in double like the reference.
__device__ __forceinline__ float kew_shrink_f(float v, float bias, float lambd) {
  const double x = (double)v, b = (double)bias, l = (double)lambd;
  const double y = x < -l ? x + b : (x > l ? x - b : 0.0);
  return (float)y;
}
__device__ __forceinline__ bool kew_isinf_f(float v, int neg, int pos) {
  const bool inf = fabsf(v) == kew_inf_f();
  return inf && ((v > 0.0f && pos != 0) || (v < 0.0f && neg != 0));
}
__device__ __forceinline__ bool kew_isnan_f(float v) { return v != v; }

// ---- float binary ops ----
__device__ __forceinline__ float kew_pymod_f(float a, float b) {
  float m = fmodf(a, b);
  if (b == 0.0f) return m;
  if (m != 0.0f) {
    if ((b < 0.0f) != (m < 0.0f)) m += b;
  } else {
    m = copysignf(0.0f, b);
  }
  return m;
}
// Max/Min of the variadic fold: NaN propagates (the first NaN seen wins).
__device__ __forceinline__ float kew_max_f(float acc, float v) {
  if (acc != acc || v != v) return acc != acc ? acc : v;
  return v > acc ? v : acc;
}
__device__ __forceinline__ float kew_min_f(float acc, float v) {
  if (acc != acc || v != v) return acc != acc ? acc : v;
  return v < acc ? v : acc;
}
__device__ __forceinline__ float kew_prelu_f(float v, float s) { return v < 0.0f ? s * v : v; }
// Clip with optional bounds (already converted to the input's dtype).
__device__ __forceinline__ float kew_clip_f(float v, bool has_lo, float lo, bool has_hi, float hi) {
  if (has_lo && v < lo) v = lo;
  if (has_hi && v > hi) v = hi;
  return v;
}

// ---- integer ops (64-bit wrap-around; callers normalize to the dtype) ----
__device__ __forceinline__ long long kew_add_i(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
__device__ __forceinline__ long long kew_sub_i(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
__device__ __forceinline__ long long kew_mul_i(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
__device__ __forceinline__ long long kew_neg_i(long long a) { return (long long)(0ULL - (unsigned long long)a); }
__device__ __forceinline__ long long kew_abs_i(long long a) { return a < 0 ? kew_neg_i(a) : a; }
__device__ __forceinline__ long long kew_sign_i(long long a) { return a > 0 ? 1 : (a < 0 ? -1 : 0); }
__device__ __forceinline__ long long kew_relu_i(long long a) { return a > 0 ? a : 0; }
__device__ __forceinline__ long long kew_prelu_i(long long v, long long s) { return v < 0 ? kew_mul_i(s, v) : v; }
// Truncating division; x/0 gives 0, x/-1 wraps.
__device__ __forceinline__ long long kew_div_i(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return kew_neg_i(a);
  return a / b;
}
__device__ __forceinline__ long long kew_rem_i(long long a, long long b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}
__device__ __forceinline__ long long kew_pymod_i(long long a, long long b) {
  long long m = kew_rem_i(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m = kew_add_i(m, b);
  return m;
}
__device__ __forceinline__ long long kew_max_i(long long a, long long b) { return b > a ? b : a; }
__device__ __forceinline__ long long kew_min_i(long long a, long long b) { return b < a ? b : a; }
__device__ __forceinline__ long long kew_clip_i(long long v, bool has_lo, long long lo, bool has_hi, long long hi) {
  if (has_lo && v < lo) v = lo;
  if (has_hi && v > hi) v = hi;
  return v;
}
// Shifts of a value of `bits` bits (inputs sign- or zero-extended by their dtype): shifts
// of at least the width, or negative, give 0 (LEFT) or the sign fill (RIGHT).
__device__ __forceinline__ long long kew_shl_i(long long x, long long y, int bits) {
  if (y < 0 || y >= bits) return 0;
  return (long long)((unsigned long long)x << (int)y);
}
__device__ __forceinline__ long long kew_shr_i(long long x, long long y, int bits) {
  if (y < 0 || y >= bits) return x < 0 ? -1 : 0;
  return x >> (int)y;
}
// Exact integer power with wrap-around; negative exponents truncate toward zero.
__device__ __forceinline__ long long kew_pow_i(long long base, long long e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  unsigned long long ue = (unsigned long long)e;
  long long result = 1, b = base;
  while (ue != 0) {
    if (ue & 1ULL) result = kew_mul_i(result, b);
    ue >>= 1;
    if (ue != 0) b = kew_mul_i(b, b);
  }
  return result;
}

)
