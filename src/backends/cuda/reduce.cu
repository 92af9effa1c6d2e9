// kiln's CUDA reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare
// (axes as a constant input 1, keepdims, noop_with_empty_axes) and ArgMax/ArgMin.
//
// Float dtypes (fp32/fp16/bf16) accumulate in float32; int32/int64 are supported for
// ReduceSum (wrapping, like the reference's uint64 arithmetic), ReduceMax and ReduceMin.
// The reduced geometry is collapsed (size-1 dims dropped, neighbours of the same kind
// merged) and one of these kernels runs:
//   [M, K]      reduced trailing block: a warp per row (K <= 2048), a block per row, or, for
//               few long rows, a split over K into workspace partials and a finishing pass;
//   [M, K, N]   one reduced block with kept dims after it: 32 columns x 8 K-slices a block,
//               coalesced along N (spatial or channel reductions of channels-last data);
//   anything else: a warp per output walking the reduced index space.
// ArgMax/ArgMin: a warp per row when the axis is innermost, else a thread per column.
// NaN propagates through Max/Min (and wins ArgMax/ArgMin, the first one or with
// select_last_index the last one), as in the reference.
#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"

namespace kiln::cuda {

namespace {

enum class RK : int { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

bool reduce_kind(Op op, RK* k) {
  switch (op) {
    case Op::ReduceSum: *k = RK::kSum; return true;
    case Op::ReduceMean: *k = RK::kMean; return true;
    case Op::ReduceMax: *k = RK::kMax; return true;
    case Op::ReduceMin: *k = RK::kMin; return true;
    case Op::ReduceProd: *k = RK::kProd; return true;
    case Op::ReduceL1: *k = RK::kL1; return true;
    case Op::ReduceL2: *k = RK::kL2; return true;
    case Op::ReduceLogSum: *k = RK::kLogSum; return true;
    case Op::ReduceLogSumExp: *k = RK::kLogSumExp; return true;
    case Op::ReduceSumSquare: *k = RK::kSumSquare; return true;
    default: return false;
  }
}

// ---------------------------------------------------------------------------------------
// reducers: State, init(), add(S&, T), merge(S&, S), shfl(S, lane_mask), finish(S, count)

struct FState {
  float a;
  float m;    // LogSumExp: largest finite value so far (-inf if none)
  int flags;  // LogSumExp: 1 = saw NaN, 2 = saw +inf
};

template <RK K>
struct FloatR {
  using S = FState;
  __device__ static S init() {
    S s;
    s.m = -INFINITY;
    s.flags = 0;
    if constexpr (K == RK::kProd) s.a = 1.f;
    else if constexpr (K == RK::kMax) s.a = -INFINITY;
    else if constexpr (K == RK::kMin) s.a = INFINITY;
    else s.a = 0.f;
    return s;
  }
  __device__ static void add_f(S& s, float v) {
    if constexpr (K == RK::kSum || K == RK::kMean || K == RK::kLogSum) s.a += v;
    else if constexpr (K == RK::kProd) s.a *= v;
    else if constexpr (K == RK::kL1) s.a += fabsf(v);
    else if constexpr (K == RK::kL2 || K == RK::kSumSquare) s.a += v * v;
    else if constexpr (K == RK::kMax) {
      if (!isnan(s.a) && (isnan(v) || v > s.a)) s.a = v;
    } else if constexpr (K == RK::kMin) {
      if (!isnan(s.a) && (isnan(v) || v < s.a)) s.a = v;
    } else {  // LogSumExp
      if (isnan(v)) {
        s.flags |= 1;
      } else if (isinf(v)) {
        if (v > 0) s.flags |= 2;
      } else if (v > s.m) {
        s.a = (s.m == -INFINITY ? 0.f : s.a * expf(s.m - v)) + 1.f;
        s.m = v;
      } else {
        s.a += expf(v - s.m);
      }
    }
  }
  template <typename T>
  __device__ static void add(S& s, T x) { add_f(s, to_f32(x)); }
  __device__ static void merge(S& s, const S& o) {
    if constexpr (K == RK::kMax || K == RK::kMin) {
      add_f(s, o.a);
    } else if constexpr (K == RK::kProd) {
      s.a *= o.a;
    } else if constexpr (K == RK::kLogSumExp) {
      s.flags |= o.flags;
      if (o.m == -INFINITY) return;
      if (s.m == -INFINITY) {
        s.a = o.a;
        s.m = o.m;
        return;
      }
      const float m = fmaxf(s.m, o.m);
      s.a = s.a * expf(s.m - m) + o.a * expf(o.m - m);
      s.m = m;
    } else {
      s.a += o.a;
    }
  }
  __device__ static S shfl(const S& s, int mask) {
    S o;
    o.a = __shfl_xor_sync(0xffffffffu, s.a, mask);
    if constexpr (K == RK::kLogSumExp) {
      o.m = __shfl_xor_sync(0xffffffffu, s.m, mask);
      o.flags = __shfl_xor_sync(0xffffffffu, s.flags, mask);
    } else {
      o.m = s.m;
      o.flags = s.flags;
    }
    return o;
  }
  template <typename T>
  __device__ static T finish(const S& s, int64_t count) {
    float r = s.a;
    if constexpr (K == RK::kMean) r = s.a / static_cast<float>(count);
    else if constexpr (K == RK::kL2) r = sqrtf(s.a);
    else if constexpr (K == RK::kLogSum) r = logf(s.a);
    else if constexpr (K == RK::kLogSumExp) {
      if (s.flags & 1) r = NAN;
      else if (s.flags & 2) r = INFINITY;
      else r = (s.m == -INFINITY ? 0.f : s.m) + logf(s.a);
    }
    return from_f32<T>(r);
  }
};

// Integer Sum (wrapping), Max, Min.
template <RK K, typename V>
struct IntR {
  using S = std::conditional_t<K == RK::kSum, unsigned long long, long long>;
  __device__ static S init() {
    if constexpr (K == RK::kSum) return 0ull;
    else if constexpr (K == RK::kMax) return sizeof(V) == 4 ? static_cast<long long>(INT32_MIN) : LLONG_MIN;
    else return sizeof(V) == 4 ? static_cast<long long>(INT32_MAX) : LLONG_MAX;
  }
  template <typename T>
  __device__ static void add(S& s, T x) {
    if constexpr (K == RK::kSum) s += static_cast<unsigned long long>(static_cast<long long>(x));
    else if constexpr (K == RK::kMax) s = max(s, static_cast<long long>(x));
    else s = min(s, static_cast<long long>(x));
  }
  __device__ static void merge(S& s, const S& o) {
    if constexpr (K == RK::kSum) s += o;
    else if constexpr (K == RK::kMax) s = max(s, o);
    else s = min(s, o);
  }
  __device__ static S shfl(const S& s, int mask) { return __shfl_xor_sync(0xffffffffu, s, mask); }
  template <typename T>
  __device__ static T finish(const S& s, int64_t) { return static_cast<T>(s); }
};

template <typename R>
__device__ __forceinline__ typename R::S warp_reduce(typename R::S s) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) R::merge(s, R::shfl(s, m));
  return s;
}

// Block-wide reduction (blockDim.x a multiple of 32, at most 1024); result in thread 0.
template <typename R>
__device__ typename R::S block_reduce(typename R::S s) {
  __shared__ typename R::S part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  s = warp_reduce<R>(s);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < nw ? part[lane] : R::init();
    s = warp_reduce<R>(s);
  }
  return s;
}

constexpr int kRowThreads = 256;    // warp-per-row kernels: 8 rows a block
constexpr int kBlockThreads = 512;  // block-per-row kernels

// [M, K] -> [M], a group of LANES lanes per row (a warp holds 32 / LANES rows). The row
// loop is uniform per warp so that every lane takes part in the shuffles.
template <typename T, typename R, int LANES>
__global__ void rows_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t M, int64_t K, int64_t count) {
  constexpr int kGroups = 32 / LANES;
  const int lane = threadIdx.x % LANES, group = (threadIdx.x & 31) / LANES;
  const int64_t wpb = blockDim.x >> 5;
  for (int64_t base = (static_cast<int64_t>(blockIdx.x) * wpb + (threadIdx.x >> 5)) * kGroups; base < M;
       base += static_cast<int64_t>(gridDim.x) * wpb * kGroups) {
    const int64_t row = base + group;
    typename R::S s = R::init();
    if (row < M) {
      const T* p = x + row * K;
      for (int64_t k = lane; k < K; k += LANES) R::add(s, p[k]);
    }
#pragma unroll
    for (int m = LANES / 2; m > 0; m >>= 1) R::merge(s, R::shfl(s, m));
    if (row < M && lane == 0) y[row] = R::template finish<T>(s, count);
  }
}

// [M, K] -> [M], a block per row.
template <typename T, typename R>
__global__ void rows_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t M, int64_t K, int64_t count) {
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const T* p = x + row * K;
    typename R::S s = R::init();
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) R::add(s, p[k]);
    s = block_reduce<R>(s);
    if (threadIdx.x == 0) y[row] = R::template finish<T>(s, count);
  }
}

// Split rows: block (c, m) reduces x[m, c*chunk : (c+1)*chunk] into ws[m * chunks + c].
template <typename T, typename R>
__global__ void rows_partial_kernel(const T* __restrict__ x, typename R::S* __restrict__ ws, int64_t M, int64_t K,
                                    int64_t chunks, int64_t chunk) {
  for (int64_t item = blockIdx.x; item < M * chunks; item += gridDim.x) {
    const int64_t m = item / chunks, c = item % chunks;
    const T* p = x + m * K;
    const int64_t k1 = min(K, (c + 1) * chunk);
    typename R::S s = R::init();
    for (int64_t k = c * chunk + threadIdx.x; k < k1; k += blockDim.x) R::add(s, p[k]);
    s = block_reduce<R>(s);
    if (threadIdx.x == 0) ws[item] = s;
  }
}

template <typename T, typename R>
__global__ void rows_finish_kernel(const typename R::S* __restrict__ ws, T* __restrict__ y, int64_t M, int64_t chunks,
                                   int64_t count) {
  const int lane = threadIdx.x & 31;
  const int64_t wpb = blockDim.x >> 5;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * wpb + (threadIdx.x >> 5); row < M;
       row += static_cast<int64_t>(gridDim.x) * wpb) {
    typename R::S s = R::init();
    for (int64_t c = lane; c < chunks; c += 32) R::merge(s, ws[row * chunks + c]);
    s = warp_reduce<R>(s);
    if (lane == 0) y[row] = R::template finish<T>(s, count);
  }
}

// [M, K, N] -> [M, N]: block (32, 8) covers 32 columns; the 8 rows of threads split K.
constexpr int kMidX = 32, kMidY = 8;

template <typename T, typename R>
__global__ void mid_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t M, int64_t K, int64_t N,
                           int64_t count) {
  __shared__ typename R::S part[kMidY][kMidX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col_tiles = (N + kMidX - 1) / kMidX;
  for (int64_t item = blockIdx.x; item < M * col_tiles; item += gridDim.x) {
    const int64_t m = item / col_tiles;
    const int64_t n = (item % col_tiles) * kMidX + tx;
    typename R::S s = R::init();
    if (n < N) {
      const T* p = x + m * K * N + n;
      for (int64_t k = ty; k < K; k += kMidY) R::add(s, p[k * N]);
    }
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && n < N) {
      for (int j = 1; j < kMidY; ++j) R::merge(s, part[j][tx]);
      y[m * N + n] = R::template finish<T>(s, count);
    }
    __syncthreads();
  }
}

// General: a warp per output; kept dims give the base offset, reduced dims are walked.
constexpr int kMaxDims = 8;
struct GeneralParams {
  int nkept = 0, nred = 0;
  int64_t kdims[kMaxDims] = {};
  int64_t kstr[kMaxDims] = {};
  int64_t rdims[kMaxDims] = {};
  int64_t rstr[kMaxDims] = {};
  int64_t nout = 0, count = 0;
};

template <typename T, typename R>
__global__ void general_kernel(const T* __restrict__ x, T* __restrict__ y, GeneralParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t wpb = blockDim.x >> 5;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * wpb + (threadIdx.x >> 5); o < p.nout;
       o += static_cast<int64_t>(gridDim.x) * wpb) {
    int64_t rem = o, base = 0;
    for (int d = p.nkept - 1; d >= 0; --d) {
      base += (rem % p.kdims[d]) * p.kstr[d];
      rem /= p.kdims[d];
    }
    typename R::S s = R::init();
    for (int64_t r = lane; r < p.count; r += 32) {
      int64_t rr = r, off = base;
      for (int d = p.nred - 1; d >= 0; --d) {
        off += (rr % p.rdims[d]) * p.rstr[d];
        rr /= p.rdims[d];
      }
      R::add(s, x[off]);
    }
    s = warp_reduce<R>(s);
    if (lane == 0) y[o] = R::template finish<T>(s, p.count);
  }
}

// Calls f.template operator()<T, R>() for the dtype and reduction kind.
template <typename F>
Status dispatch_reduce(DataType dt, RK kind, F&& f) {
  auto with_float = [&]<typename T>() -> Status {
    switch (kind) {
      case RK::kSum: return f.template operator()<T, FloatR<RK::kSum>>();
      case RK::kMean: return f.template operator()<T, FloatR<RK::kMean>>();
      case RK::kMax: return f.template operator()<T, FloatR<RK::kMax>>();
      case RK::kMin: return f.template operator()<T, FloatR<RK::kMin>>();
      case RK::kProd: return f.template operator()<T, FloatR<RK::kProd>>();
      case RK::kL1: return f.template operator()<T, FloatR<RK::kL1>>();
      case RK::kL2: return f.template operator()<T, FloatR<RK::kL2>>();
      case RK::kLogSum: return f.template operator()<T, FloatR<RK::kLogSum>>();
      case RK::kLogSumExp: return f.template operator()<T, FloatR<RK::kLogSumExp>>();
      case RK::kSumSquare: return f.template operator()<T, FloatR<RK::kSumSquare>>();
    }
    return unsupported("reduce kind");
  };
  auto with_int = [&]<typename T>() -> Status {
    switch (kind) {
      case RK::kSum: return f.template operator()<T, IntR<RK::kSum, T>>();
      case RK::kMax: return f.template operator()<T, IntR<RK::kMax, T>>();
      case RK::kMin: return f.template operator()<T, IntR<RK::kMin, T>>();
      default: return unsupported("integer reduction on CUDA");
    }
  };
  switch (dt) {
    case DataType::kFloat32: return with_float.template operator()<float>();
    case DataType::kFloat16: return with_float.template operator()<__half>();
    case DataType::kBFloat16: return with_float.template operator()<__nv_bfloat16>();
    case DataType::kInt32: return with_int.template operator()<int32_t>();
    case DataType::kInt64: return with_int.template operator()<int64_t>();
    default: return unsupported("reduce dtype ", dtype_name(dt), " on CUDA");
  }
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(RK kind, DataType dt, std::vector<int64_t> axes, bool keepdims, bool noop, int sm_count)
      : kind_(kind), dt_(dt), axes_(std::move(axes)), keepdims_(keepdims), noop_(noop),
        sm_count_(sm_count > 0 ? sm_count : 132) {}

  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    const int64_t rank = static_cast<int64_t>(x.size());
    std::vector<bool> reduced(static_cast<size_t>(rank), false);
    if (axes_.empty()) {
      if (!noop_) std::fill(reduced.begin(), reduced.end(), true);
    } else {
      for (int64_t a : axes_) {
        KILN_ENSURE(a >= -rank && a < rank, "Reduce: axis ", a, " is out of range for rank ", rank);
        if (a < 0) a += rank;
        KILN_ENSURE(!reduced[static_cast<size_t>(a)], "Reduce: axis ", a, " repeated");
        reduced[static_cast<size_t>(a)] = true;
      }
    }
    Dims want;
    count_ = 1;
    nout_ = 1;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t sz = x[static_cast<size_t>(d)];
      if (reduced[static_cast<size_t>(d)]) {
        count_ *= sz;
        if (keepdims_) want.push_back(1);
      } else {
        nout_ *= sz;
        want.push_back(sz);
      }
    }
    KILN_ENSURE(out[0].dims == want, "Reduce: output shape ", dims_str(out[0].dims), " differs from ", dims_str(want));
    mode_ = kRows;
    M_ = nout_;
    K_ = count_;
    N_ = 1;
    chunks_ = 0;
    if (nout_ == 0) return Status::ok();
    if (count_ == 0) return Status::ok();  // rows kernel with K = 0 writes the empty results
    // Collapse: drop size-1 dims, merge neighbours of the same kind.
    std::vector<int64_t> gd;
    std::vector<bool> gr;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t sz = x[static_cast<size_t>(d)];
      if (sz == 1) continue;
      const bool r = reduced[static_cast<size_t>(d)];
      if (!gd.empty() && gr.back() == r) gd.back() *= sz;
      else {
        gd.push_back(sz);
        gr.push_back(r);
      }
    }
    const size_t g = gd.size();
    if (g == 0) {
      M_ = 1;
      K_ = 1;
    } else if (g == 1) {
      M_ = gr[0] ? 1 : gd[0];
      K_ = gr[0] ? gd[0] : 1;
    } else if (g == 2 && !gr[0]) {
      M_ = gd[0];
      K_ = gd[1];
    } else if (g == 2) {
      mode_ = kMid;
      M_ = 1;
      K_ = gd[0];
      N_ = gd[1];
    } else if (g == 3 && !gr[0]) {
      mode_ = kMid;
      M_ = gd[0];
      K_ = gd[1];
      N_ = gd[2];
    } else {
      mode_ = kGeneral;
      // Kept / reduced dims with their input strides (uncollapsed is fine: rank <= 8 each).
      const Dims cs = contiguous_strides(x);
      gp_ = GeneralParams{};
      for (int64_t d = 0; d < rank; ++d) {
        const size_t ud = static_cast<size_t>(d);
        if (x[ud] == 1) continue;
        if (reduced[ud]) {
          KILN_ENSURE(gp_.nred < kMaxDims, "Reduce: too many dims");
          gp_.rdims[gp_.nred] = x[ud];
          gp_.rstr[gp_.nred++] = cs[ud];
        } else {
          KILN_ENSURE(gp_.nkept < kMaxDims, "Reduce: too many dims");
          gp_.kdims[gp_.nkept] = x[ud];
          gp_.kstr[gp_.nkept++] = cs[ud];
        }
      }
      gp_.nout = nout_;
      gp_.count = count_;
      return Status::ok();
    }
    if (mode_ == kRows && K_ > 2048 && M_ < 2 * sm_count_ && K_ >= 16384) {
      // Few long rows: split K so that about 4 blocks per SM run.
      int64_t chunks = std::max<int64_t>(2, (4 * sm_count_ + M_ - 1) / M_);
      int64_t chunk = (K_ + chunks - 1) / chunks;
      chunk = std::max<int64_t>(chunk, 4096);
      chunks = (K_ + chunk - 1) / chunk;
      if (chunks > 1) {
        chunks_ = chunks;
        chunk_ = chunk;
        *ws = static_cast<size_t>(M_ * chunks_) * 16;
      }
    }
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void* ws,
                 cudaStream_t stream) override {
    if (nout_ == 0) return Status::ok();
    const void* xv = in[0]->raw();
    void* yv = out[0]->raw();
    return dispatch_reduce(dt_, kind_, [&]<typename T, typename R>() -> Status {
      const T* x = static_cast<const T*>(xv);
      T* y = static_cast<T*>(yv);
      if (mode_ == kRows) {
        if (chunks_ > 1) {
          static_assert(sizeof(typename R::S) <= 16, "state size");
          auto* w = static_cast<typename R::S*>(ws);
          const unsigned b1 = static_cast<unsigned>(std::min<int64_t>(M_ * chunks_, 65535LL * 32));
          rows_partial_kernel<T, R><<<b1, kBlockThreads, 0, stream>>>(x, w, M_, K_, chunks_, chunk_);
          KILN_CUDA_LAUNCH_CHECK("reduce partial");
          rows_finish_kernel<T, R><<<blocks_for(M_, kRowThreads / 32), kRowThreads, 0, stream>>>(w, y, M_, chunks_, count_);
          KILN_CUDA_LAUNCH_CHECK("reduce finish");
        } else if (K_ <= 2048 || M_ >= 8 * int64_t{sm_count_}) {
          // Lanes per row: about 4+ elements per lane, at most a warp.
          int lanes = 1;
          while (lanes < 32 && lanes * 8 <= K_) lanes *= 2;
          auto go = [&]<int L>() -> Status {
            const int64_t rows_per_block = kRowThreads / L;
            rows_warp_kernel<T, R, L><<<blocks_for(M_, static_cast<int>(rows_per_block)), kRowThreads, 0, stream>>>(
                x, y, M_, K_, count_);
            KILN_CUDA_LAUNCH_CHECK("reduce rows");
            return Status::ok();
          };
          switch (lanes) {
            case 1: return go.template operator()<1>();
            case 2: return go.template operator()<2>();
            case 4: return go.template operator()<4>();
            case 8: return go.template operator()<8>();
            case 16: return go.template operator()<16>();
            default: return go.template operator()<32>();
          }
        } else {
          const unsigned b = static_cast<unsigned>(std::min<int64_t>(M_, 65535LL * 32));
          rows_block_kernel<T, R><<<b, kBlockThreads, 0, stream>>>(x, y, M_, K_, count_);
          KILN_CUDA_LAUNCH_CHECK("reduce rows (block)");
        }
      } else if (mode_ == kMid) {
        const int64_t items = M_ * ((N_ + kMidX - 1) / kMidX);
        const unsigned b = static_cast<unsigned>(std::min<int64_t>(items, 65535LL * 32));
        mid_kernel<T, R><<<b, dim3(kMidX, kMidY), 0, stream>>>(x, y, M_, K_, N_, count_);
        KILN_CUDA_LAUNCH_CHECK("reduce mid");
      } else {
        general_kernel<T, R><<<blocks_for(nout_, kRowThreads / 32), kRowThreads, 0, stream>>>(x, y, gp_);
        KILN_CUDA_LAUNCH_CHECK("reduce general");
      }
      return Status::ok();
    });
  }

 private:
  enum Mode { kRows, kMid, kGeneral };
  RK kind_;
  DataType dt_;
  std::vector<int64_t> axes_;
  bool keepdims_, noop_;
  int sm_count_;
  Mode mode_ = kRows;
  int64_t count_ = 0, nout_ = 0, M_ = 0, K_ = 0, N_ = 1, chunks_ = 0, chunk_ = 0;
  GeneralParams gp_;
};

bool reduce_supports(const LayerSpec& spec) {
  RK kind;
  if (!reduce_kind(spec.op, &kind)) return false;
  const DataType dt = spec.input_dtype(0);
  const size_t nin = spec.input_dtypes.size();
  if (nin < 1 || nin > 2 || spec.output_dtypes.size() != 1 || spec.output_dtype(0) != dt) return false;
  const bool int_ok = (dt == DataType::kInt32 || dt == DataType::kInt64) &&
                      (kind == RK::kSum || kind == RK::kMax || kind == RK::kMin);
  if (!is_cuda_float(dt) && !int_ok) return false;
  if (spec.attributes().has("axes")) return false;  // kiln's form takes axes as input 1
  if (spec.has_input(1)) {
    const Tensor* a = spec.constant(1);
    if (!a || !is_integer(a->dtype()) || a->rank() > 1 || a->size() > 8) return false;
  }
  return true;
}

Result<std::unique_ptr<Kernel>> reduce_create(const LayerSpec& spec) {
  if (!reduce_supports(spec)) return unsupported("kiln_cuda_reduce: unsupported layer");
  RK kind = RK::kSum;
  reduce_kind(spec.op, &kind);
  std::vector<int64_t> axes;
  if (spec.has_input(1)) axes = spec.constant(1)->to_int_vector();
  const Attributes& a = spec.attributes();
  return std::unique_ptr<Kernel>(new ReduceKernel(kind, spec.input_dtype(0), std::move(axes),
                                                  a.get_int("keepdims", 1) != 0,
                                                  a.get_int("noop_with_empty_axes", 0) != 0,
                                                  spec.env ? spec.env->sm_count : 0));
}

// ---------------------------------------------------------------------------------------
// ArgMax / ArgMin

template <typename T>
struct ArgVal {
  using V = float;
  __device__ static V get(T x) { return to_f32(x); }
  __device__ static bool nan(V v) { return isnan(v); }
};
template <>
struct ArgVal<int32_t> {
  using V = long long;
  __device__ static V get(int32_t x) { return x; }
  __device__ static bool nan(V) { return false; }
};
template <>
struct ArgVal<int64_t> {
  using V = long long;
  __device__ static V get(int64_t x) { return static_cast<long long>(x); }
  __device__ static bool nan(V) { return false; }
};

template <typename V>
struct ArgState {
  V v;
  long long i;  // -1: empty
};

// The winner of a and b (a total order: NaN first, then value, then index).
template <typename T, bool kMax, bool kLast>
__device__ __forceinline__ ArgState<typename ArgVal<T>::V> arg_pick(const ArgState<typename ArgVal<T>::V>& a,
                                                                   const ArgState<typename ArgVal<T>::V>& b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  const bool an = ArgVal<T>::nan(a.v), bn = ArgVal<T>::nan(b.v);
  const bool a_first = a.i < b.i;
  if (an && bn) return (a_first != kLast) ? a : b;
  if (an) return a;
  if (bn) return b;
  if (a.v == b.v) return (a_first != kLast) ? a : b;
  if constexpr (kMax) return a.v > b.v ? a : b;
  else return a.v < b.v ? a : b;
}

// Replaces each lane's state with the winner of the warp's 32 (the whole warp must call it).
template <typename T, bool kMax, bool kLast>
__device__ __forceinline__ void warp_arg_reduce(ArgState<typename ArgVal<T>::V>& s) {
  using V = typename ArgVal<T>::V;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    ArgState<V> o;
    o.v = __shfl_xor_sync(0xffffffffu, s.v, m);
    o.i = __shfl_xor_sync(0xffffffffu, s.i, m);
    s = arg_pick<T, kMax, kLast>(s, o);
  }
}

// inner == 1: a warp per row of n elements.
template <typename T, bool kMax, bool kLast>
__global__ void arg_rows_kernel(const T* __restrict__ x, int64_t* __restrict__ y, int64_t M, int64_t n) {
  using V = typename ArgVal<T>::V;
  const int lane = threadIdx.x & 31;
  const int64_t wpb = blockDim.x >> 5;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * wpb + (threadIdx.x >> 5); row < M;
       row += static_cast<int64_t>(gridDim.x) * wpb) {
    const T* p = x + row * n;
    ArgState<V> s{V{}, -1};
    for (int64_t k = lane; k < n; k += 32) s = arg_pick<T, kMax, kLast>(s, ArgState<V>{ArgVal<T>::get(p[k]), k});
    warp_arg_reduce<T, kMax, kLast>(s);
    if (lane == 0) y[row] = s.i;
  }
}

// inner == 1, long rows, few of them: a block per row.
template <typename T, bool kMax, bool kLast>
__global__ void arg_rows_block_kernel(const T* __restrict__ x, int64_t* __restrict__ y, int64_t M, int64_t n) {
  using V = typename ArgVal<T>::V;
  __shared__ ArgState<V> part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const T* p = x + row * n;
    ArgState<V> s{V{}, -1};
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s = arg_pick<T, kMax, kLast>(s, ArgState<V>{ArgVal<T>::get(p[k]), k});
    warp_arg_reduce<T, kMax, kLast>(s);
    __syncthreads();
    if (lane == 0) part[warp] = s;
    __syncthreads();
    if (warp == 0) {
      s = lane < nw ? part[lane] : ArgState<V>{V{}, -1};
      warp_arg_reduce<T, kMax, kLast>(s);
      if (lane == 0) y[row] = s.i;
    }
  }
}

// inner > 1: a thread per (outer, inner) column.
template <typename T, bool kMax, bool kLast>
__global__ void arg_cols_kernel(const T* __restrict__ x, int64_t* __restrict__ y, int64_t outer, int64_t n,
                                int64_t inner) {
  using V = typename ArgVal<T>::V;
  const int64_t total = outer * inner;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, in = c - o * inner;
    const T* p = x + o * n * inner + in;
    ArgState<V> s{V{}, -1};
    for (int64_t k = 0; k < n; ++k) s = arg_pick<T, kMax, kLast>(s, ArgState<V>{ArgVal<T>::get(p[k * inner]), k});
    y[c] = s.i;
  }
}

class ArgKernel final : public Kernel {
 public:
  ArgKernel(bool is_max, bool last, int64_t axis, bool keepdims, DataType dt, int sm_count)
      : max_(is_max), last_(last), axis_(axis), keepdims_(keepdims), dt_(dt), sm_count_(sm_count > 0 ? sm_count : 132) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* ws) override {
    *ws = 0;
    const Dims& x = in[0].dims;
    const int64_t rank = static_cast<int64_t>(x.size());
    const int64_t r1 = std::max<int64_t>(rank, 1);
    int64_t axis = axis_;
    KILN_ENSURE(axis >= -r1 && axis < r1, "ArgMax/ArgMin: axis ", axis, " out of range");
    if (axis < 0) axis += r1;
    Dims dims = x;
    if (dims.empty()) dims.push_back(1);
    n_ = dims[static_cast<size_t>(axis)];
    KILN_ENSURE(n_ > 0, "ArgMax/ArgMin over an empty axis");
    outer_ = inner_ = 1;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (static_cast<int64_t>(d) < axis) outer_ *= dims[d];
      if (static_cast<int64_t>(d) > axis) inner_ *= dims[d];
    }
    Dims want;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis) want.push_back(x[static_cast<size_t>(d)]);
      else if (keepdims_) want.push_back(1);
    }
    KILN_ENSURE(out[0].dims == want && out[0].dtype == DataType::kInt64, "ArgMax/ArgMin: output differs");
    return Status::ok();
  }
  Status enqueue(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*,
                 cudaStream_t stream) override {
    if (outer_ * inner_ == 0) return Status::ok();
    const void* xv = in[0]->raw();
    auto* y = static_cast<int64_t*>(out[0]->raw());
    auto typed = [&]<typename T>() -> Status {
      const T* x = static_cast<const T*>(xv);
      auto go = [&]<bool kMax, bool kLast>() -> Status {
        if (inner_ == 1 && n_ > 1024 && outer_ < 8 * int64_t{sm_count_}) {
          const unsigned b = static_cast<unsigned>(std::min<int64_t>(outer_, 65535LL * 32));
          arg_rows_block_kernel<T, kMax, kLast><<<b, kBlockThreads, 0, stream>>>(x, y, outer_, n_);
        } else if (inner_ == 1) {
          arg_rows_kernel<T, kMax, kLast><<<blocks_for(outer_, kRowThreads / 32), kRowThreads, 0, stream>>>(x, y, outer_, n_);
        } else {
          arg_cols_kernel<T, kMax, kLast><<<blocks_for(outer_ * inner_, 256), 256, 0, stream>>>(x, y, outer_, n_, inner_);
        }
        KILN_CUDA_LAUNCH_CHECK("argmax/argmin");
        return Status::ok();
      };
      if (max_) return last_ ? go.template operator()<true, true>() : go.template operator()<true, false>();
      return last_ ? go.template operator()<false, true>() : go.template operator()<false, false>();
    };
    switch (dt_) {
      case DataType::kFloat32: return typed.template operator()<float>();
      case DataType::kFloat16: return typed.template operator()<__half>();
      case DataType::kBFloat16: return typed.template operator()<__nv_bfloat16>();
      case DataType::kInt32: return typed.template operator()<int32_t>();
      case DataType::kInt64: return typed.template operator()<int64_t>();
      default: return unsupported("ArgMax/ArgMin dtype on CUDA");
    }
  }

 private:
  bool max_, last_;
  int64_t axis_;
  bool keepdims_;
  DataType dt_;
  int sm_count_;
  int64_t outer_ = 1, inner_ = 1, n_ = 0;
};

bool arg_supports(const LayerSpec& spec) {
  const DataType dt = spec.input_dtype(0);
  return spec.input_dtypes.size() == 1 && spec.output_dtypes.size() == 1 && spec.output_dtype(0) == DataType::kInt64 &&
         (is_cuda_float(dt) || dt == DataType::kInt32 || dt == DataType::kInt64);
}

Result<std::unique_ptr<Kernel>> arg_create(const LayerSpec& spec) {
  if (!arg_supports(spec)) return unsupported("kiln_cuda_argmax: unsupported layer");
  const Attributes& a = spec.attributes();
  return std::unique_ptr<Kernel>(new ArgKernel(spec.op == Op::ArgMax, a.get_int("select_last_index", 0) != 0,
                                               a.get_int("axis", 0), a.get_int("keepdims", 1) != 0,
                                               spec.input_dtype(0), spec.env ? spec.env->sm_count : 0));
}

}  // namespace

void add_reduce_tactics(std::vector<Tactic>& out) {
  for (Op op : {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax, Op::ReduceMin, Op::ReduceProd, Op::ReduceL1,
                Op::ReduceL2, Op::ReduceLogSum, Op::ReduceLogSumExp, Op::ReduceSumSquare}) {
    out.push_back({"kiln_cuda_reduce", op, reduce_supports, reduce_create});
  }
  out.push_back({"kiln_cuda_argmax", Op::ArgMax, arg_supports, arg_create});
  out.push_back({"kiln_cuda_argmin", Op::ArgMin, arg_supports, arg_create});
}

}  // namespace kiln::cuda
