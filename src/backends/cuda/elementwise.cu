// CUDA elementwise kernels: "kiln_cuda_elementwise" (every kElementwise op the reference
// computes for float16/bfloat16/float32, integer and bool inputs, with numpy
// broadcasting) and "kiln_cuda_cast" (Cast / CastLike). FusedElementwise ("nvrtc_fused")
// lives in fused_elementwise.cpp and is registered from add_elementwise_tactics.
//
// Two kernels:
//   fast     float dtypes, unary and binary arithmetic, every input contiguous with the
//            output or a single element: 4 elements per thread with 16/8-byte vector
//            loads and stores when the pointers allow it.
//   generic  everything else: per-input dtype and layout (contiguous, one element, or
//            strided over the coalesced output dims), 32-bit index math when it fits.
// Both switch on the op code at run time (uniform across the grid); the op functions
// themselves are those of elementwise_ops.cuh, shared with the NVRTC kernels.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/fused_elementwise.h"

namespace kiln::cuda {
namespace ew {

#define KILN_EW_OPS(...) __VA_ARGS__
#include "backends/cuda/elementwise_ops.cuh"
#undef KILN_EW_OPS

namespace {

// ---- the op switch ----

__device__ __forceinline__ float apply_unary_f(int code, float v, float a, float b) {
  switch (code) {
    case kAbsF: return fabsf(v);
    case kNegF: return -v;
    case kSignF: return kew_sign_f(v);
    case kExpF: return expf(v);
    case kLogF: return logf(v);
    case kSqrtF: return sqrtf(v);
    case kRecipF: return 1.0f / v;
    case kFloorF: return floorf(v);
    case kCeilF: return ceilf(v);
    case kRoundF: return rintf(v);
    case kSinF: return sinf(v);
    case kCosF: return cosf(v);
    case kTanF: return tanf(v);
    case kAsinF: return asinf(v);
    case kAcosF: return acosf(v);
    case kAtanF: return atanf(v);
    case kSinhF: return sinhf(v);
    case kCoshF: return coshf(v);
    case kAsinhF: return asinhf(v);
    case kAcoshF: return acoshf(v);
    case kAtanhF: return atanhf(v);
    case kErfF: return erff(v);
    case kReluF: return kew_relu_f(v);
    case kLeakyReluF: return kew_leaky_relu_f(v, a);
    case kEluF: return kew_elu_f(v, a);
    case kSeluF: return kew_selu_f(v, a, b);
    case kCeluF: return kew_celu_f(v, a);
    case kThresholdedReluF: return kew_thresholded_relu_f(v, a);
    case kSigmoidF: return kew_sigmoid_f(v);
    case kHardSigmoidF: return kew_hard_sigmoid_f(v, a, b);
    case kHardSwishF: return kew_hard_swish_f(v);
    case kTanhF: return tanhf(v);
    case kGeluF: return kew_gelu_f(v);
    case kGeluTanhF: return kew_gelu_tanh_f(v);
    case kSoftplusF: return kew_softplus_f(v);
    case kSoftsignF: return kew_softsign_f(v);
    case kMishF: return kew_mish_f(v);
    case kSwishF: return kew_swish_f(v, a);
    case kShrinkF: return kew_shrink_f(v, a, b);
    default: return kew_nan_f();
  }
}

// Float binary arithmetic (also two-input Sum/Mean/Max/Min).
__device__ __forceinline__ float apply_binary_f(int code, float x, float y) {
  switch (code) {
    case kAdd: case kSum: return x + y;
    case kSub: return x - y;
    case kMul: return x * y;
    case kDiv: return x / y;
    case kFmod: return fmodf(x, y);
    case kPyMod: return kew_pymod_f(x, y);
    case kMax2: case kMaxN: return kew_max_f(x, y);
    case kMin2: case kMinN: return kew_min_f(x, y);
    case kPRelu: return kew_prelu_f(x, y);
    case kMean: return (x + y) / 2.0f;
    default: return kew_nan_f();
  }
}

__device__ __forceinline__ long long apply_binary_i(int code, long long x, long long y, int bits) {
  switch (code) {
    case kAdd: case kSum: return kew_add_i(x, y);
    case kSub: return kew_sub_i(x, y);
    case kMul: return kew_mul_i(x, y);
    case kDiv: return kew_div_i(x, y);
    case kFmod: return kew_rem_i(x, y);
    case kPyMod: return kew_pymod_i(x, y);
    case kMax2: case kMaxN: return kew_max_i(x, y);
    case kMin2: case kMinN: return kew_min_i(x, y);
    case kPRelu: return kew_prelu_i(x, y);
    case kAndB: return (x != 0 && y != 0) ? 1 : 0;
    case kOrB: return (x != 0 || y != 0) ? 1 : 0;
    case kXorB: return ((x != 0) != (y != 0)) ? 1 : 0;
    case kShl: return kew_shl_i(x, y, bits);
    case kShr: return kew_shr_i(x, y, bits);
    case kBitAnd: return x & y;
    case kBitOr: return x | y;
    case kBitXor: return x ^ y;
    default: return 0;
  }
}

template <typename V>
__device__ __forceinline__ bool apply_compare(int code, V x, V y) {
  switch (code) {
    case kEq: return x == y;
    case kLt: return x < y;
    case kLe: return x <= y;
    case kGt: return x > y;
    default: return x >= y;
  }
}

// ---- fast kernel: float dtypes, every input contiguous or one element ----

template <int DT> struct Raw { using T = float; using V = float4; };
template <> struct Raw<KEW_F16> { using T = unsigned short; using V = ushort4; };
template <> struct Raw<KEW_BF16> { using T = unsigned short; using V = ushort4; };

template <int DT>
__device__ __forceinline__ float cvt_in(typename Raw<DT>::T x) {
  if constexpr (DT == KEW_F16) return kew_h2f(x);
  else if constexpr (DT == KEW_BF16) return kew_b2f(x);
  else return x;
}
template <int DT>
__device__ __forceinline__ typename Raw<DT>::T cvt_out(float x) {
  if constexpr (DT == KEW_F16) return kew_f2h(x);
  else if constexpr (DT == KEW_BF16) return kew_f2b(x);
  else return x;
}

struct FastParams {
  const void* in[2];
  bool scalar[2];
  void* out;
  long long n;
  long long nvec;  // groups of 4 done with vector loads (0 when misaligned)
  int code;
  float a, b;
};

template <int DT, int NIN>
__global__ void fast_kernel(const FastParams p) {
  using T = typename Raw<DT>::T;
  using V = typename Raw<DT>::V;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long tid = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const T* x0 = static_cast<const T*>(p.in[0]);
  const T* x1 = static_cast<const T*>(p.in[NIN > 1 ? 1 : 0]);
  T* y = static_cast<T*>(p.out);
  const float s0 = p.scalar[0] ? cvt_in<DT>(x0[0]) : 0.0f;
  const float s1 = (NIN > 1 && p.scalar[1]) ? cvt_in<DT>(x1[0]) : 0.0f;
  for (long long g = tid; g < p.nvec; g += stride) {
    float a[4], b[4];
    if (p.scalar[0]) {
      a[0] = a[1] = a[2] = a[3] = s0;
    } else {
      const V v = reinterpret_cast<const V*>(x0)[g];
      a[0] = cvt_in<DT>(v.x); a[1] = cvt_in<DT>(v.y); a[2] = cvt_in<DT>(v.z); a[3] = cvt_in<DT>(v.w);
    }
    if constexpr (NIN > 1) {
      if (p.scalar[1]) {
        b[0] = b[1] = b[2] = b[3] = s1;
      } else {
        const V v = reinterpret_cast<const V*>(x1)[g];
        b[0] = cvt_in<DT>(v.x); b[1] = cvt_in<DT>(v.y); b[2] = cvt_in<DT>(v.z); b[3] = cvt_in<DT>(v.w);
      }
    }
    float r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (NIN > 1) r[j] = apply_binary_f(p.code, a[j], b[j]);
      else r[j] = apply_unary_f(p.code, a[j], p.a, p.b);
    }
    V o;
    o.x = cvt_out<DT>(r[0]); o.y = cvt_out<DT>(r[1]); o.z = cvt_out<DT>(r[2]); o.w = cvt_out<DT>(r[3]);
    reinterpret_cast<V*>(y)[g] = o;
  }
  for (long long i = p.nvec * 4 + tid; i < p.n; i += stride) {
    const float a = p.scalar[0] ? s0 : cvt_in<DT>(x0[i]);
    float r;
    if constexpr (NIN > 1) {
      const float b = p.scalar[1] ? s1 : cvt_in<DT>(x1[i]);
      r = apply_binary_f(p.code, a, b);
    } else {
      r = apply_unary_f(p.code, a, p.a, p.b);
    }
    y[i] = cvt_out<DT>(r);
  }
}

// ---- generic kernel ----

struct GenParams {
  long long n;
  int rank, nin, code, dom_float, out_dt, elem;
  float a, b;
  int i0, i1;
  long long dims[kMaxRank];
  const void* in[kMaxInputs];
  int in_dt[kMaxInputs];
  int in_kind[kMaxInputs];  // Layout::kind
  long long strides[kMaxInputs][kMaxRank];
  void* out;
};

template <typename I>
__device__ __forceinline__ long long offset_of(const GenParams& p, int k, I i) {
  const int kind = p.in_kind[k];
  if (kind == 0) return static_cast<long long>(i);
  if (kind == 1) return 0;
  long long off = 0;
  if (p.rank == 1) return static_cast<long long>(i) * p.strides[k][0];
  I rem = i;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < p.rank) {
      const I dim = static_cast<I>(p.dims[d]);
      const I c = rem % dim;
      rem /= dim;
      off += static_cast<long long>(c) * p.strides[k][d];
    }
  }
  return off;
}

template <typename I>
__global__ void generic_kernel(const GenParams p) {
  const I n = static_cast<I>(p.n);
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const int code = p.code;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const long long o = static_cast<long long>(i);
    auto ldf = [&](int k) { return kew_ldf(p.in[k], p.in_dt[k], offset_of<I>(p, k, i)); };
    auto ldi = [&](int k) { return kew_ldi(p.in[k], p.in_dt[k], offset_of<I>(p, k, i)); };
    if (code <= kLastUnaryF) {
      kew_stf(p.out, p.out_dt, o, apply_unary_f(code, ldf(0), p.a, p.b));
    } else if (code == kIsNaN) {
      kew_sti(p.out, p.out_dt, o, kew_isnan_f(ldf(0)) ? 1 : 0);
    } else if (code == kIsInf) {
      kew_sti(p.out, p.out_dt, o, kew_isinf_f(ldf(0), p.i0, p.i1) ? 1 : 0);
    } else if (code >= kAbsI && code <= kNotB) {
      const long long v = ldi(0);
      long long r;
      switch (code) {
        case kAbsI: r = kew_abs_i(v); break;
        case kNegI: r = kew_neg_i(v); break;
        case kSignI: r = kew_sign_i(v); break;
        case kReluI: r = kew_relu_i(v); break;
        case kBitNotI: r = ~v; break;
        default: r = v != 0 ? 0 : 1; break;  // Not
      }
      kew_sti(p.out, p.out_dt, o, r);
    } else if (code >= kAdd && code <= kBitXor) {
      const bool cmp = code >= kEq && code <= kGe;
      if (p.dom_float) {
        const float x = ldf(0), y = ldf(1);
        if (cmp) kew_sti(p.out, p.out_dt, o, apply_compare(code, x, y) ? 1 : 0);
        else kew_stf(p.out, p.out_dt, o, apply_binary_f(code, x, y));
      } else {
        const long long x = ldi(0), y = ldi(1);
        if (cmp) kew_sti(p.out, p.out_dt, o, apply_compare(code, x, y) ? 1 : 0);
        else kew_sti(p.out, p.out_dt, o, apply_binary_i(code, x, y, p.i0));
      }
    } else if (code >= kSum && code <= kMinN) {
      if (p.dom_float) {
        float acc = ldf(0);
        for (int k = 1; k < p.nin; ++k) {
          const float v = ldf(k);
          acc = code == kMaxN ? kew_max_f(acc, v) : code == kMinN ? kew_min_f(acc, v) : acc + v;
        }
        if (code == kMean) acc = acc / static_cast<float>(p.nin);
        kew_stf(p.out, p.out_dt, o, acc);
      } else {
        long long acc = ldi(0);
        for (int k = 1; k < p.nin; ++k) {
          const long long v = ldi(k);
          acc = code == kMaxN ? kew_max_i(acc, v) : code == kMinN ? kew_min_i(acc, v) : kew_add_i(acc, v);
        }
        if (code == kMean) acc = kew_div_i(kew_norm(acc, p.out_dt), static_cast<long long>(p.nin));
        kew_sti(p.out, p.out_dt, o, acc);
      }
    } else if (code == kWhere) {
      const bool c = ldi(0) != 0;
      const int k = c ? 1 : 2;
      const long long off = offset_of<I>(p, k, i);
      switch (p.elem) {
        case 1: static_cast<unsigned char*>(p.out)[o] = static_cast<const unsigned char*>(p.in[k])[off]; break;
        case 2: static_cast<unsigned short*>(p.out)[o] = static_cast<const unsigned short*>(p.in[k])[off]; break;
        case 4: static_cast<unsigned int*>(p.out)[o] = static_cast<const unsigned int*>(p.in[k])[off]; break;
        default:
          static_cast<unsigned long long*>(p.out)[o] = static_cast<const unsigned long long*>(p.in[k])[off];
          break;
      }
    } else if (code == kClip) {
      bool has[2] = {false, false};
      double bd[2] = {0, 0};
      long long bi[2] = {0, 0};
      bool bf[2] = {false, false};
      for (int k = 1; k < 3 && k < p.nin; ++k) {
        if (!p.in[k]) continue;
        has[k - 1] = true;
        bf[k - 1] = kew_is_float_dt(p.in_dt[k]);
        if (bf[k - 1]) bd[k - 1] = kew_ldd(p.in[k], p.in_dt[k], 0);
        else bi[k - 1] = kew_ldi(p.in[k], p.in_dt[k], 0);
      }
      if (p.dom_float) {
        const float lo = kew_conv_f(bf[0], bd[0], bi[0], p.out_dt), hi = kew_conv_f(bf[1], bd[1], bi[1], p.out_dt);
        kew_stf(p.out, p.out_dt, o, kew_clip_f(ldf(0), has[0], lo, has[1], hi));
      } else {
        const long long lo = kew_conv_i(bf[0], bd[0], bi[0], p.out_dt), hi = kew_conv_i(bf[1], bd[1], bi[1], p.out_dt);
        kew_sti(p.out, p.out_dt, o, kew_clip_i(ldi(0), has[0], lo, has[1], hi));
      }
    } else if (code == kPow) {
      const bool exp_float = kew_is_float_dt(p.in_dt[1]);
      if (!p.dom_float && !exp_float) {
        kew_sti(p.out, p.out_dt, o, kew_pow_i(ldi(0), ldi(1)));
      } else {
        const double base = p.dom_float ? static_cast<double>(ldf(0)) : static_cast<double>(ldi(0));
        const double e = kew_ldd(p.in[1], p.in_dt[1], offset_of<I>(p, 1, i));
        const double r = pow(base, e);
        if (p.dom_float) kew_stf(p.out, p.out_dt, o, static_cast<float>(r));
        else kew_sti(p.out, p.out_dt, o, kew_d2i(r, p.out_dt));
      }
    } else if (code == kCast) {
      const int sdt = p.in_dt[0];
      const bool sf = kew_is_float_dt(sdt);
      const long long off = offset_of<I>(p, 0, i);
      const double d = sf ? kew_ldd(p.in[0], sdt, off) : 0.0;
      const long long q = sf ? 0 : kew_ldi(p.in[0], sdt, off);
      const int t = p.out_dt;
      if (t == KEW_F64) static_cast<double*>(p.out)[o] = sf ? d : static_cast<double>(q);
      else if (kew_is_float_dt(t)) kew_stf(p.out, t, o, kew_conv_f(sf, d, q, t));
      else kew_sti(p.out, t, o, kew_conv_i(sf, d, q, t));
    }
  }
}

// ---- kernels ----

// Runs the layer of `d` (or a Cast when cast is true) over the layout of prepare().
class ElementwiseKernel final : public Kernel {
 public:
  ElementwiseKernel(const OpDesc& d, std::vector<DataType> in_dts) : d_(d), in_dts_(std::move(in_dts)) {}

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* workspace_bytes) override {
    *workspace_bytes = 0;
    if (outputs.size() != 1) return invalid_argument("elementwise op has ", outputs.size(), " outputs");
    if (outputs[0].dtype != d_.out) {
      return invalid_argument("output dtype ", dtype_name(outputs[0].dtype), ", expected ", dtype_name(d_.out));
    }
    const size_t nin = d_.code == kCast ? 1 : in_dts_.size();
    if (inputs.size() < nin) return invalid_argument("expected ", nin, " inputs, got ", inputs.size());
    std::vector<const Dims*> dims;
    std::vector<bool> scalar;
    for (size_t k = 0; k < nin; ++k) {
      const bool omitted = inputs[k].dtype == DataType::kUndefined;
      if (omitted != (in_dts_[k] == DataType::kUndefined) || (!omitted && inputs[k].dtype != in_dts_[k])) {
        return invalid_argument("input ", k, " dtype ", dtype_name(inputs[k].dtype), ", expected ", dtype_name(in_dts_[k]));
      }
      dims.push_back(omitted ? nullptr : &inputs[k].dims);
      scalar.push_back(d_.code == kClip && k > 0);
    }
    if (d_.code == kClip || d_.code == kCast) {
      if (inputs[0].dims != outputs[0].dims) return invalid_argument("output shape differs from the input's");
    }
    Layout l;
    KILN_RETURN_IF_ERROR(make_layout(outputs[0].dims, dims, scalar, &l));
    nin_ = static_cast<int>(nin);
    n_ = l.n;
    std::memset(&gp_, 0, sizeof(gp_));
    gp_.n = l.n;
    gp_.rank = l.rank;
    gp_.nin = nin_;
    gp_.code = d_.code;
    gp_.dom_float = d_.dom == Dom::kFloat;
    gp_.out_dt = static_cast<int>(d_.out);
    gp_.elem = static_cast<int>(dtype_size(d_.out));
    gp_.a = d_.a;
    gp_.b = d_.b;
    gp_.i0 = d_.i0;
    gp_.i1 = d_.i1;
    for (int j = 0; j < l.rank; ++j) gp_.dims[j] = l.dims[j];
    for (int k = 0; k < nin_; ++k) {
      gp_.in_dt[k] = static_cast<int>(in_dts_[static_cast<size_t>(k)]);
      gp_.in_kind[k] = l.kind[k];
      for (int j = 0; j < l.rank; ++j) gp_.strides[k][j] = l.strides[k][j];
    }
    // The fast path: float arithmetic on one dtype, every input contiguous or one element.
    fast_ = false;
    const bool float_same = d_.dom == Dom::kFloat && d_.code != kCast && d_.code != kClip && d_.code != kPow &&
                            d_.code != kWhere;
    if (float_same && (nin_ == 1 || nin_ == 2) && l.kind[0] != 2 && (nin_ == 1 || l.kind[1] != 2)) {
      bool same = true;
      for (int k = 0; k < nin_; ++k) same = same && in_dts_[static_cast<size_t>(k)] == d_.out;
      const bool unary = nin_ == 1 && is_float_unary(d_.code);
      const bool binary = nin_ == 2 && ((is_binary(d_.code) && !is_compare(d_.code) && d_.code <= kPRelu) ||
                                        is_variadic(d_.code));
      fast_ = same && (unary || binary);
    }
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* workspace,
                 cudaStream_t stream) override {
    if (n_ == 0) return Status::ok();
    if (d_.code == kCast && d_.out == in_dts_[0]) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(outputs[0]->raw(), inputs[0]->raw(), static_cast<size_t>(n_) * dtype_size(d_.out),
                                      cudaMemcpyDeviceToDevice, stream));
      return Status::ok();
    }
    const int threads = 256;
    if (fast_) {
      FastParams fp{};
      fp.n = n_;
      fp.code = d_.code;
      fp.a = d_.a;
      fp.b = d_.b;
      fp.out = outputs[0]->raw();
      const size_t vec_bytes = d_.out == DataType::kFloat32 ? 16 : 8;
      bool aligned = reinterpret_cast<uintptr_t>(fp.out) % vec_bytes == 0;
      for (int k = 0; k < nin_; ++k) {
        fp.in[k] = inputs[static_cast<size_t>(k)]->raw();
        fp.scalar[k] = gp_.in_kind[k] == 1;
        if (!fp.scalar[k]) aligned = aligned && reinterpret_cast<uintptr_t>(fp.in[k]) % vec_bytes == 0;
      }
      fp.nvec = aligned ? n_ / 4 : 0;
      const unsigned blocks = blocks_for(fp.nvec > 0 ? fp.nvec : n_, threads);
      const auto launch = [&]<int DT>() -> Status {
        if (nin_ == 1) fast_kernel<DT, 1><<<blocks, threads, 0, stream>>>(fp);
        else fast_kernel<DT, 2><<<blocks, threads, 0, stream>>>(fp);
        KILN_CUDA_LAUNCH_CHECK("fast elementwise kernel");
        return Status::ok();
      };
      switch (d_.out) {
        case DataType::kFloat16: return launch.template operator()<KEW_F16>();
        case DataType::kBFloat16: return launch.template operator()<KEW_BF16>();
        default: return launch.template operator()<KEW_F32>();
      }
    }
    GenParams p = gp_;
    for (int k = 0; k < nin_; ++k) {
      const Tensor* t = inputs[static_cast<size_t>(k)];
      p.in[k] = t ? t->raw() : nullptr;
    }
    p.out = outputs[0]->raw();
    const unsigned blocks = blocks_for(n_, threads);
    if (n_ <= INT32_MAX) generic_kernel<uint32_t><<<blocks, threads, 0, stream>>>(p);
    else generic_kernel<int64_t><<<blocks, threads, 0, stream>>>(p);
    KILN_CUDA_LAUNCH_CHECK("generic elementwise kernel");
    return Status::ok();
  }

 private:
  OpDesc d_;
  std::vector<DataType> in_dts_;
  GenParams gp_{};
  int nin_ = 0;
  int64_t n_ = 0;
  bool fast_ = false;
};

bool ew_supports(const LayerSpec& s) {
  if (s.output_dtypes.size() != 1) return false;
  OpDesc d;
  return describe(s.op, s.attributes(), s.input_dtypes, &d) && d.out == s.output_dtypes[0];
}

Result<std::unique_ptr<Kernel>> ew_create(const LayerSpec& s) {
  OpDesc d;
  if (s.output_dtypes.size() != 1 || !describe(s.op, s.attributes(), s.input_dtypes, &d) ||
      d.out != s.output_dtypes[0]) {
    return unsupported("kiln_cuda_elementwise does not support this ", op_name(s.op), " layer");
  }
  return std::unique_ptr<Kernel>(new ElementwiseKernel(d, s.input_dtypes));
}

bool cast_supports(const LayerSpec& s) {
  DataType to;
  return s.output_dtypes.size() == 1 && describe_cast(s.attributes(), s.input_dtypes, &to) &&
         to == s.output_dtypes[0];
}

Result<std::unique_ptr<Kernel>> cast_create(const LayerSpec& s) {
  if (!cast_supports(s)) return unsupported("kiln_cuda_cast does not support this Cast layer");
  OpDesc d;
  d.code = kCast;
  d.dom = domain_of(s.input_dtypes[0]);
  d.out = s.output_dtypes[0];
  return std::unique_ptr<Kernel>(new ElementwiseKernel(d, {s.input_dtypes[0]}));
}

}  // namespace
}  // namespace ew

void add_elementwise_tactics(std::vector<Tactic>& out) {
  static const Op kOps[] = {
      Op::Abs, Op::Neg, Op::Sign, Op::Exp, Op::Log, Op::Sqrt, Op::Reciprocal, Op::Floor, Op::Ceil, Op::Round,
      Op::Sin, Op::Cos, Op::Tan, Op::Asin, Op::Acos, Op::Atan, Op::Sinh, Op::Cosh, Op::Asinh, Op::Acosh, Op::Atanh,
      Op::Erf, Op::IsNaN, Op::IsInf, Op::Not, Op::BitwiseNot, Op::Relu, Op::LeakyRelu, Op::Elu, Op::Selu,
      Op::Celu, Op::ThresholdedRelu, Op::Sigmoid, Op::HardSigmoid, Op::HardSwish, Op::Tanh, Op::Gelu,
      Op::Softplus, Op::Softsign, Op::Mish, Op::Swish, Op::Shrink, Op::PRelu, Op::Add, Op::Sub, Op::Mul,
      Op::Div, Op::Pow, Op::Mod, Op::Max, Op::Min, Op::Sum, Op::Mean, Op::Equal, Op::Less, Op::LessOrEqual,
      Op::Greater, Op::GreaterOrEqual, Op::And, Op::Or, Op::Xor, Op::BitShift, Op::BitwiseAnd, Op::BitwiseOr,
      Op::BitwiseXor, Op::Where, Op::Clip,
  };
  for (Op op : kOps) out.push_back(Tactic{"kiln_cuda_elementwise", op, ew::ew_supports, ew::ew_create});
  out.push_back(Tactic{"kiln_cuda_cast", Op::Cast, ew::cast_supports, ew::cast_create});
  add_fused_elementwise_tactics(out);
}

}  // namespace kiln::cuda
