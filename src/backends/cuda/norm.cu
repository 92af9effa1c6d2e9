// kiln's CUDA normalization kernels: LayerNormalization, RMSNormalization and
// FusedResidualNorm (tactic "kiln_cuda_layernorm"), Softmax and LogSoftmax (tactic
// "kiln_cuda_softmax"), for float32, float16 and bfloat16 (all inputs and outputs of one
// dtype), with float32 statistics.
//
// Normalization: one block per row (rows beyond the grid loop), the row cached in shared
// memory as float when it fits (n <= 12032), two-pass mean/variance from the cache (no
// cancellation), vectorized 16-byte loads/stores when the row length and the pointers
// allow. FusedResidualNorm rounds X + R to the storage type before normalizing, as the
// reference (an Add then a LayerNorm) does.
//
// Softmax along the last axis (inner == 1): one block per row, cached likewise; along any
// other axis: one thread per (outer, inner) column, coalesced across threads.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/fast/geometry.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda {

namespace {

// ---- device helpers ----

constexpr int64_t kMaxCacheFloats = 12032;  // under 48 KiB of shared memory with the static part
constexpr int64_t kMaxGrid = int64_t{1} << 30;

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, w) : v + w;
  }
  return v;
}

// Sum (or max) over the block; every thread gets the result. blockDim.x is a multiple of 32.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  v = warp_reduce<MAX>(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[w] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : (MAX ? -INFINITY : 0.0f);
  return warp_reduce<MAX>(r);
}

template <typename T>
__device__ __forceinline__ float round_t(float x) {
  return to_f32(from_f32<T>(x));
}

// ---- LayerNorm / RMSNorm / FusedResidualNorm ----

struct NormParams {
  const void* x = nullptr;
  const void* r = nullptr;  // residual (FusedResidualNorm)
  const void* scale = nullptr;
  const void* bias = nullptr;  // nullptr: none
  void* y = nullptr;
  void* sum = nullptr;  // Sum output (FusedResidualNorm), nullptr: not wanted
  int64_t rows = 0, n = 0;
  int64_t scale_mod = 0, bias_mod = 0;  // parameter index: i % mod (0: one value)
  float eps = 1e-5f;
};

__device__ __forceinline__ int64_t param_index(int64_t i, int64_t mod, int64_t n) {
  return mod == n ? i : (mod <= 1 ? 0 : i % mod);
}

template <typename T, int V, bool RES, bool RMS, bool CACHE>
__global__ void norm_kernel(NormParams p) {
  extern __shared__ float cache[];
  __shared__ float red[32];
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ res = static_cast<const T*>(p.r);
  const T* __restrict__ sc = static_cast<const T*>(p.scale);
  const T* __restrict__ bi = static_cast<const T*>(p.bias);
  T* __restrict__ y = static_cast<T*>(p.y);
  T* __restrict__ so = static_cast<T*>(p.sum);
  const int64_t n = p.n;
  const float inv_n = 1.0f / static_cast<float>(n);
  const int64_t step = static_cast<int64_t>(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * n;
    // Loads V values of the row at i (X, or X + R rounded to T).
    auto load = [&](int64_t i, float* v, bool write_sum) {
      const Vec<T, V> a = *reinterpret_cast<const Vec<T, V>*>(x + base + i);
      if constexpr (RES) {
        const Vec<T, V> b = *reinterpret_cast<const Vec<T, V>*>(res + base + i);
        Vec<T, V> s;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          s.v[k] = from_f32<T>(to_f32(a.v[k]) + to_f32(b.v[k]));
          v[k] = to_f32(s.v[k]);
        }
        if (write_sum && so) *reinterpret_cast<Vec<T, V>*>(so + base + i) = s;
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = to_f32(a.v[k]);
      }
    };
    // The same values in the later passes: from the cache when the row is cached.
    auto reload = [&](int64_t i, float* v) {
      if constexpr (CACHE) {
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = cache[i + k];
      } else {
        load(i, v, false);
      }
    };
    // Pass 1: sum (or sum of squares), filling the cache.
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * V; i < n; i += step) {
      float v[V];
      load(i, v, true);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        acc += RMS ? v[k] * v[k] : v[k];
        if constexpr (CACHE) cache[i + k] = v[k];
      }
    }
    const float total = block_reduce<false>(acc, red);
    float mean = 0.0f, var;
    if constexpr (RMS) {
      var = total * inv_n;
    } else {
      mean = total * inv_n;
      float ss = 0.0f;
      for (int64_t i = static_cast<int64_t>(threadIdx.x) * V; i < n; i += step) {
        float v[V];
        reload(i, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = v[k] - mean;
          ss += d * d;
        }
      }
      var = block_reduce<false>(ss, red) * inv_n;
    }
    const float inv = 1.0f / sqrtf(var + p.eps);
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * V; i < n; i += step) {
      float v[V];
      reload(i, v);
      Vec<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float t = (v[k] - mean) * inv * to_f32(sc[param_index(i + k, p.scale_mod, n)]);
        if (bi) t += to_f32(bi[param_index(i + k, p.bias_mod, n)]);
        o.v[k] = from_f32<T>(t);
      }
      *reinterpret_cast<Vec<T, V>*>(y + base + i) = o;
    }
  }
}

int threads_for_row(int64_t vecs) {
  int64_t t = (vecs + 31) / 32 * 32;
  if (t < 32) t = 32;
  if (t > 512) t = 512;
  return static_cast<int>(t);
}

bool aligned16(const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, int V, bool RES, bool RMS>
Status launch_norm_v(const NormParams& p, cudaStream_t stream) {
  const int threads = threads_for_row((p.n + V - 1) / V);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.rows, kMaxGrid));
  if (p.n <= kMaxCacheFloats) {
    norm_kernel<T, V, RES, RMS, true>
        <<<grid, threads, static_cast<size_t>(p.n) * sizeof(float), stream>>>(p);
  } else {
    norm_kernel<T, V, RES, RMS, false><<<grid, threads, 0, stream>>>(p);
  }
  KILN_CUDA_LAUNCH_CHECK("norm_kernel");
  return Status::ok();
}

template <typename T, bool RES, bool RMS>
Status launch_norm(const NormParams& p, cudaStream_t stream) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  const bool vec = p.n % kV == 0 && aligned16(p.x) && aligned16(p.r) && aligned16(p.y) && aligned16(p.sum);
  if (vec) return launch_norm_v<T, kV, RES, RMS>(p, stream);
  return launch_norm_v<T, 1, RES, RMS>(p, stream);
}

enum class NormKind { kLayerNorm, kRMSNorm };

// Checks that a scale/bias of `pdims` broadcasts to X and varies only along the
// normalized axes [axis, rank), as one value or as a full suffix of X's dims; returns the
// modulus of its index within a row (0: one value).
Status param_mod(const Dims& pdims, const Dims& xdims, int64_t axis, const char* what, int64_t* mod) {
  if (pdims.size() > xdims.size()) return unsupported(what, " ", dims_str(pdims), " has more dimensions than X");
  const size_t lead = xdims.size() - pdims.size();
  // Strip leading 1s: what remains must equal X's trailing dims, inside the normalized axes.
  size_t first = 0;
  while (first < pdims.size() && pdims[first] == 1) ++first;
  int64_t count = 1;
  for (size_t d = first; d < pdims.size(); ++d) {
    if (pdims[d] != xdims[lead + d]) {
      return unsupported(what, " ", dims_str(pdims), " is not a suffix of X ", dims_str(xdims));
    }
    if (static_cast<int64_t>(lead + d) < axis) {
      return unsupported(what, " ", dims_str(pdims), " varies outside the normalized axes");
    }
    count *= pdims[d];
  }
  *mod = first == pdims.size() ? 0 : count;
  return Status::ok();
}

// Inputs: LayerNorm X, scale, bias?; RMSNorm X, scale; residual: X, R, scale, bias?.
// Outputs: Y (and Sum for the residual form).
class NormKernel final : public Kernel {
 public:
  NormKernel(NormKind kind, bool residual, int64_t axis, float eps, DataType dt)
      : kind_(kind), residual_(residual), axis_(axis), eps_(eps), dt_(dt) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out,
                 size_t* workspace) override {
    *workspace = 0;
    const size_t p0 = residual_ ? 2 : 1;
    if (in.size() <= p0 || out.empty()) return invalid_argument("normalization: missing inputs");
    const Dims& x = in[0].dims;
    if (x.empty()) return unsupported("normalization: X must have rank >= 1");
    if (out[0].dims != x) return invalid_argument("normalization: Y shape differs from X");
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t axis = axis_;
    if (axis < -r || axis >= r) return invalid_argument("normalization: axis ", axis_, " out of range");
    if (axis < 0) axis += r;
    if (residual_) {
      if (axis != r - 1) return unsupported("FusedResidualNorm: only the last axis");
      if (in[1].dims != x) return unsupported("FusedResidualNorm: R shape differs from X");
      if (out.size() > 1 && out[1].dtype != DataType::kUndefined && out[1].dims != x) {
        return invalid_argument("FusedResidualNorm: Sum shape differs from X");
      }
    }
    rows_ = n_ = 1;
    for (int64_t d = 0; d < r; ++d) (d < axis ? rows_ : n_) *= x[static_cast<size_t>(d)];
    KILN_RETURN_IF_ERROR(param_mod(in[p0].dims, x, axis, "scale", &scale_mod_));
    has_bias_ = in.size() > p0 + 1 && in[p0 + 1].dtype != DataType::kUndefined;
    if (has_bias_) KILN_RETURN_IF_ERROR(param_mod(in[p0 + 1].dims, x, axis, "bias", &bias_mod_));
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (rows_ == 0 || n_ == 0) return Status::ok();
    const size_t p0 = residual_ ? 2 : 1;
    NormParams p;
    p.x = in[0]->raw();
    p.r = residual_ ? in[1]->raw() : nullptr;
    p.scale = in[p0]->raw();
    p.bias = has_bias_ && in.size() > p0 + 1 && in[p0 + 1] ? in[p0 + 1]->raw() : nullptr;
    p.y = out[0]->raw();
    p.sum = residual_ && out.size() > 1 && out[1] ? out[1]->raw() : nullptr;
    p.rows = rows_;
    p.n = n_;
    p.scale_mod = scale_mod_;
    p.bias_mod = bias_mod_;
    p.eps = eps_;
    const bool rms = kind_ == NormKind::kRMSNorm;
    return KILN_CUDA_FLOAT_DISPATCH(dt_, {
      if (residual_) return rms ? launch_norm<T, true, true>(p, stream) : launch_norm<T, true, false>(p, stream);
      return rms ? launch_norm<T, false, true>(p, stream) : launch_norm<T, false, false>(p, stream);
    });
  }

 private:
  NormKind kind_;
  bool residual_;
  int64_t axis_;
  float eps_;
  DataType dt_;
  int64_t rows_ = 0, n_ = 0, scale_mod_ = 0, bias_mod_ = 0;
  bool has_bias_ = false;
};

bool valid_stash(const Attributes& a) {
  const int64_t s = a.get_int("stash_type", 1);
  return s == 1 || s == 10 || s == 11 || s == 16;
}

// Inputs [0, n) present (optional ones may be absent where `optional_from` <= i) of one
// CUDA float dtype, output 0 of that dtype.
bool same_float_dtypes(const LayerSpec& spec, size_t required, size_t max_in) {
  const size_t nin = spec.input_dtypes.size();
  if (nin < required || nin > max_in) return false;
  const DataType dt = spec.input_dtype(0);
  if (!is_cuda_float(dt)) return false;
  for (size_t i = 0; i < nin; ++i) {
    if (i < required ? spec.input_dtype(i) != dt : (spec.has_input(i) && spec.input_dtype(i) != dt)) return false;
  }
  return spec.output_dtype(0) == dt;
}

bool norm_supports(const LayerSpec& spec) {
  const Attributes& a = spec.attributes();
  switch (spec.op) {
    case Op::LayerNormalization:
      if (!same_float_dtypes(spec, 2, 3) || !valid_stash(a)) return false;
      if (spec.output_dtypes.size() > 3) return false;
      for (size_t i = 1; i < spec.output_dtypes.size(); ++i) {
        if (spec.wants_output(i)) return false;  // Mean / InvStdDev
      }
      return true;
    case Op::RMSNormalization:
      return same_float_dtypes(spec, 2, 2) && spec.output_dtypes.size() == 1 && valid_stash(a);
    case Op::FusedResidualNorm: {
      if (!same_float_dtypes(spec, 3, 4)) return false;
      const std::string norm = a.get_string("norm", "LayerNorm");
      if (norm != "LayerNorm" && norm != "RMSNorm") return false;
      if (norm == "RMSNorm" && spec.has_input(3)) return false;
      if (spec.output_dtypes.size() > 2) return false;
      return !spec.wants_output(1) || spec.output_dtype(1) == spec.input_dtype(0);
    }
    default:
      return false;
  }
}

Result<std::unique_ptr<Kernel>> norm_create(const LayerSpec& spec) {
  if (!norm_supports(spec)) return unsupported("kiln_cuda_layernorm: unsupported layer");
  const Attributes& a = spec.attributes();
  const float eps = a.get_float("epsilon", 1e-5f);
  const int64_t axis = a.get_int("axis", -1);
  const DataType dt = spec.input_dtype(0);
  switch (spec.op) {
    case Op::LayerNormalization:
      return std::unique_ptr<Kernel>(new NormKernel(NormKind::kLayerNorm, false, axis, eps, dt));
    case Op::RMSNormalization:
      return std::unique_ptr<Kernel>(new NormKernel(NormKind::kRMSNorm, false, axis, eps, dt));
    default: {
      const bool rms = a.get_string("norm", "LayerNorm") == "RMSNorm";
      return std::unique_ptr<Kernel>(
          new NormKernel(rms ? NormKind::kRMSNorm : NormKind::kLayerNorm, true, axis, eps, dt));
    }
  }
}

// ---- Softmax / LogSoftmax ----

// v = the V values at i of a softmax row, as float: from the shared-memory cache when the
// row is cached, else from the row xr itself.
template <typename T, int V, bool CACHE>
__device__ __forceinline__ void load_row(const float* cache, const T* xr, int64_t i, float (&v)[V]) {
  if constexpr (CACHE) {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = cache[i + k];
  } else {
    const Vec<T, V> a = *reinterpret_cast<const Vec<T, V>*>(xr + i);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = to_f32(a.v[k]);
  }
}

// Along a contiguous row of n values: one block per row.
template <typename T, int V, bool LOG, bool CACHE>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n) {
  extern __shared__ float cache[];
  __shared__ float red[32];
  const int64_t step = static_cast<int64_t>(blockDim.x) * V;
  const int64_t start = static_cast<int64_t>(threadIdx.x) * V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    float m = -INFINITY;
    for (int64_t i = start; i < n; i += step) {
      const Vec<T, V> a = *reinterpret_cast<const Vec<T, V>*>(xr + i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float v = to_f32(a.v[k]);
        m = fmaxf(m, v);  // NaN skipped, as std::max in the reference
        if constexpr (CACHE) cache[i + k] = v;
      }
    }
    m = block_reduce<true>(m, red);
    float s = 0.0f;
    for (int64_t i = start; i < n; i += step) {
      float v[V];
      load_row<T, V, CACHE>(cache, xr, i, v);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float e = expf(v[k] - m);
        s += e;
        if constexpr (CACHE && !LOG) cache[i + k] = e;
      }
    }
    s = block_reduce<false>(s, red);
    const float ls = logf(s);
    for (int64_t i = start; i < n; i += step) {
      float v[V];
      load_row<T, V, CACHE>(cache, xr, i, v);
      Vec<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float r;
        if constexpr (LOG) r = (v[k] - m) - ls;
        else if constexpr (CACHE) r = v[k] / s;  // the cache holds exp(x - m)
        else r = expf(v[k] - m) / s;
        o.v[k] = from_f32<T>(r);
      }
      *reinterpret_cast<Vec<T, V>*>(yr + i) = o;
    }
  }
}

// Along an axis with inner > 1: one thread per (outer, inner) column.
template <typename T, bool LOG>
__global__ void softmax_columns_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                       int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, j = c - o * inner;
    const T* xc = x + o * n * inner + j;
    T* yc = y + o * n * inner + j;
    float m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = fmaxf(m, to_f32(xc[k * inner]));
    float s = 0.0f;
    for (int64_t k = 0; k < n; ++k) s += expf(to_f32(xc[k * inner]) - m);
    const float ls = logf(s);
    for (int64_t k = 0; k < n; ++k) {
      const float d = to_f32(xc[k * inner]) - m;
      yc[k * inner] = from_f32<T>(LOG ? d - ls : expf(d) / s);
    }
  }
}

template <typename T, int V, bool LOG>
Status launch_softmax_rows(const T* x, T* y, int64_t rows, int64_t n, cudaStream_t stream) {
  const int threads = threads_for_row((n + V - 1) / V);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rows, kMaxGrid));
  if (n <= kMaxCacheFloats) {
    softmax_rows_kernel<T, V, LOG, true><<<grid, threads, static_cast<size_t>(n) * sizeof(float), stream>>>(x, y, rows, n);
  } else {
    softmax_rows_kernel<T, V, LOG, false><<<grid, threads, 0, stream>>>(x, y, rows, n);
  }
  KILN_CUDA_LAUNCH_CHECK("softmax_rows_kernel");
  return Status::ok();
}

template <typename T, bool LOG>
Status launch_softmax(const void* xv, void* yv, int64_t outer, int64_t n, int64_t inner, cudaStream_t stream) {
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  if (inner == 1) {
    constexpr int kV = static_cast<int>(16 / sizeof(T));
    if (n % kV == 0 && aligned16(x) && aligned16(y)) return launch_softmax_rows<T, kV, LOG>(x, y, outer, n, stream);
    return launch_softmax_rows<T, 1, LOG>(x, y, outer, n, stream);
  }
  softmax_columns_kernel<T, LOG><<<blocks_for(outer * inner, 256, kMaxGrid), 256, 0, stream>>>(x, y, outer, n, inner);
  KILN_CUDA_LAUNCH_CHECK("softmax_columns_kernel");
  return Status::ok();
}

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(bool log, int64_t axis, bool coerce, DataType dt) : log_(log), axis_(axis), coerce_(coerce), dt_(dt) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out,
                 size_t* workspace) override {
    *workspace = 0;
    if (in.empty() || out.empty() || in[0].dims != out[0].dims) {
      return invalid_argument("Softmax: output shape differs from input");
    }
    return fast::softmax_geometry(in[0].dims, axis_, coerce_, &outer_, &n_, &inner_);
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (outer_ == 0 || n_ == 0 || inner_ == 0) return Status::ok();
    const void* x = in[0]->raw();
    void* y = out[0]->raw();
    return KILN_CUDA_FLOAT_DISPATCH(dt_, {
      return log_ ? launch_softmax<T, true>(x, y, outer_, n_, inner_, stream)
                  : launch_softmax<T, false>(x, y, outer_, n_, inner_, stream);
    });
  }

 private:
  bool log_;
  int64_t axis_;
  bool coerce_;
  DataType dt_;
  int64_t outer_ = 0, n_ = 0, inner_ = 0;
};

bool softmax_supports(const LayerSpec& spec) {
  if (spec.op != Op::Softmax && spec.op != Op::LogSoftmax) return false;
  return spec.input_dtypes.size() == 1 && spec.output_dtypes.size() == 1 && is_cuda_float(spec.input_dtype(0)) &&
         spec.output_dtype(0) == spec.input_dtype(0);
}

Result<std::unique_ptr<Kernel>> softmax_create(const LayerSpec& spec) {
  if (!softmax_supports(spec)) return unsupported("kiln_cuda_softmax: unsupported layer");
  const Attributes& a = spec.attributes();
  const bool coerce = a.get_int("kiln_coerce_2d", 0) != 0;
  return std::unique_ptr<Kernel>(
      new SoftmaxKernel(spec.op == Op::LogSoftmax, a.get_int("axis", coerce ? 1 : -1), coerce, spec.input_dtype(0)));
}

}  // namespace

void add_norm_tactics(std::vector<Tactic>& out) {
  out.push_back({"kiln_cuda_layernorm", Op::LayerNormalization, norm_supports, norm_create});
  out.push_back({"kiln_cuda_layernorm", Op::RMSNormalization, norm_supports, norm_create});
  out.push_back({"kiln_cuda_layernorm", Op::FusedResidualNorm, norm_supports, norm_create});
  out.push_back({"kiln_cuda_softmax", Op::Softmax, softmax_supports, softmax_create});
  out.push_back({"kiln_cuda_softmax", Op::LogSoftmax, softmax_supports, softmax_create});
}

}  // namespace kiln::cuda
