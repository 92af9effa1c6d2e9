// Own CUDA kernels of the conv family (see conv_kernels.h): the conv epilogue, explicit
// zero padding, the depthwise convolution tactic (kiln_cuda_depthwise) and the pooling
// tactic (kiln_cuda_pool). Everything accumulates in float32; float32, float16 and
// bfloat16 tensors; NCHW and (attribute kiln_layout = "NHWC") channels-last layouts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/reference/nn_common.h"
#include "backends/cuda/conv_kernels.h"
#include "backends/cuda/cuda_common.h"

namespace kiln::cuda::conv {

// ---------------------------------------------------------------------------------------
// Attribute helpers (host)
// ---------------------------------------------------------------------------------------

bool parse_activation(Op op, const Attributes& a, Activation* out) {
  *out = Activation{};
  if (op != Op::FusedConv) return true;
  const std::string act = a.get_string("activation", "None");
  Activation r;
  if (act == "None") {
    r.kind = Act::kNone;
  } else if (act == "Relu") {
    r.kind = Act::kRelu;
  } else if (act == "Clip") {
    r.kind = Act::kClip;
    r.lo = a.has("min") ? a.get_float("min", 0.0f) : -std::numeric_limits<float>::infinity();
    r.hi = a.has("max") ? a.get_float("max", 0.0f) : std::numeric_limits<float>::infinity();
  } else if (act == "LeakyRelu") {
    r.kind = Act::kLeakyRelu;
    r.alpha = a.get_float("alpha", 0.01f);
  } else if (act == "Sigmoid") {
    r.kind = Act::kSigmoid;
  } else if (act == "HardSigmoid") {
    r.kind = Act::kHardSigmoid;
    r.alpha = a.get_float("alpha", 0.2f);
    r.beta = a.get_float("beta", 0.5f);
  } else if (act == "HardSwish") {
    r.kind = Act::kHardSwish;
  } else if (act == "SiLU") {
    r.kind = Act::kSiLU;
  } else if (act == "Swish") {
    r.kind = Act::kSwish;
    r.alpha = a.get_float("alpha", 1.0f);
  } else if (act == "Tanh") {
    r.kind = Act::kTanh;
  } else if (act == "Gelu") {
    const std::string approx = a.get_string("approximate", "none");
    if (approx == "none") r.kind = Act::kGeluErf;
    else if (approx == "tanh") r.kind = Act::kGeluTanh;
    else return false;
  } else {
    return false;
  }
  *out = r;
  return true;
}

bool parse_layout(const Attributes& a, bool* nhwc) {
  const std::string l = a.get_string("kiln_layout", "NCHW");
  if (l == "NCHW") {
    *nhwc = false;
    return true;
  }
  if (l == "NHWC") {
    *nhwc = true;
    return true;
  }
  return false;
}

namespace {

const Tensor* input_at(const std::vector<const Tensor*>& in, size_t i) { return i < in.size() ? in[i] : nullptr; }


// ---------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------

struct ActParams {
  int kind;
  float alpha, beta, lo, hi;
};

ActParams to_params(const Activation& a) {
  return ActParams{static_cast<int>(a.kind), a.alpha, a.beta, a.lo, a.hi};
}

__device__ __forceinline__ float sigmoid_f(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
  const float e = expf(v);
  return e / (1.0f + e);
}

__device__ __forceinline__ float apply_act(float v, const ActParams& p) {
  switch (static_cast<Act>(p.kind)) {
    case Act::kNone:
      return v;
    case Act::kRelu:
      return v > 0.0f ? v : (v != v ? v : 0.0f);
    case Act::kClip:
      if (v < p.lo) v = p.lo;
      if (v > p.hi) v = p.hi;
      return v;
    case Act::kLeakyRelu:
      return v < 0.0f ? p.alpha * v : v;
    case Act::kSigmoid:
      return sigmoid_f(v);
    case Act::kHardSigmoid:
      return fmaxf(0.0f, fminf(1.0f, p.alpha * v + p.beta));
    case Act::kHardSwish:
      return v * fmaxf(0.0f, fminf(1.0f, v / 6.0f + 0.5f));
    case Act::kSiLU:
      return v * sigmoid_f(v);
    case Act::kSwish:
      return v * sigmoid_f(p.alpha * v);
    case Act::kTanh:
      return tanhf(v);
    case Act::kGeluErf:
      return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
    case Act::kGeluTanh: {
      const float k = 0.79788456080286535588f;  // sqrt(2/pi)
      return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
  }
  return v;
}

int grid_for(int64_t n, int threads = 256) { return static_cast<int>(blocks_for(n, threads)); }

// ---------------------------------------------------------------------------------------
// Epilogue
// ---------------------------------------------------------------------------------------

template <typename T>
__global__ void epilogue_kernel(T* y, const T* bias, const T* z, int64_t total, int64_t channels, int64_t inner,
                                bool read_y, ActParams ap) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = read_y ? to_f32(y[i]) : 0.0f;
    if (bias) v += to_f32(bias[(i / inner) % channels]);
    if (z) v += to_f32(z[i]);
    y[i] = from_f32<T>(apply_act(v, ap));
  }
}

// ---------------------------------------------------------------------------------------
// Padding
// ---------------------------------------------------------------------------------------

struct PadGeom {
  int64_t N, C;
  int64_t in[3], out[3], pb[3];  // 3 spatial axes, unused leading ones of extent 1
  bool nhwc;
};

template <typename T>
__global__ void pad_kernel(const T* __restrict__ x, T* __restrict__ xp, int64_t total, PadGeom g) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t = i, c = 0, o[3];
    if (g.nhwc) {
      c = t % g.C;
      t /= g.C;
    }
    o[2] = t % g.out[2];
    t /= g.out[2];
    o[1] = t % g.out[1];
    t /= g.out[1];
    o[0] = t % g.out[0];
    t /= g.out[0];
    if (!g.nhwc) {
      c = t % g.C;
      t /= g.C;
    }
    const int64_t n = t;
    bool inside = true;
    int64_t s[3];
    for (int d = 0; d < 3; ++d) {
      s[d] = o[d] - g.pb[d];
      if (s[d] < 0 || s[d] >= g.in[d]) inside = false;
    }
    T v;
    if (inside) {
      const int64_t sp = (s[0] * g.in[1] + s[1]) * g.in[2] + s[2];
      const int64_t sp_total = g.in[0] * g.in[1] * g.in[2];
      v = g.nhwc ? x[(n * sp_total + sp) * g.C + c] : x[(n * g.C + c) * sp_total + sp];
    } else {
      v = from_f32<T>(0.0f);
    }
    xp[i] = v;
  }
}

// ---------------------------------------------------------------------------------------
// Depthwise convolution (group == C, W [M, 1, kh, kw], M = C * multiplier)
// ---------------------------------------------------------------------------------------

struct DwGeom {
  int64_t N, C, M, mult;
  int64_t H, W, OH, OW;
  int KH, KW;
  int64_t sh, sw, dh, dw, ph, pw;
};

// Index arithmetic in I: int32_t when every tensor has fewer than 2^31 elements (the
// common case, much cheaper), else int64_t.

// Channels-last kernels handle V consecutive channels per thread: V = 1 in general, and
// 16 bytes' worth (kVec<T>: 8 float16/bfloat16 or 4 float32) when the channel count is a
// multiple of it and the tensors are 16-byte aligned, so each load is one vector access.
template <typename T>
constexpr int kVec = static_cast<int>(16 / sizeof(T));
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[V]) {
  const Pack<T, V> a = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_f32(a.v[j]);
}
template <typename T, int V>
__device__ __forceinline__ void store_f32(T* p, const float (&in)[V]) {
  Pack<T, V> a;
#pragma unroll
  for (int j = 0; j < V; ++j) a.v[j] = from_f32<T>(in[j]);
  *reinterpret_cast<Pack<T, V>*>(p) = a;
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// NCHW: one thread per output element, ow fastest. Weights float [M, KH*KW].
template <typename T, typename I>
__global__ void depthwise_nchw_kernel(const T* __restrict__ x, const float* __restrict__ w, const T* __restrict__ bias,
                                      const T* __restrict__ z, T* __restrict__ y, I total, DwGeom g, ActParams ap) {
  const I OW = static_cast<I>(g.OW), OH = static_cast<I>(g.OH), M = static_cast<I>(g.M), H = static_cast<I>(g.H),
          W = static_cast<I>(g.W), C = static_cast<I>(g.C), mult = static_cast<I>(g.mult);
  const I sh = static_cast<I>(g.sh), sw = static_cast<I>(g.sw), dh = static_cast<I>(g.dh), dw = static_cast<I>(g.dw),
          ph = static_cast<I>(g.ph), pw = static_cast<I>(g.pw);
  const int KH = g.KH, KW = g.KW;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I t = i;
    const I ow = t % OW;
    t /= OW;
    const I oh = t % OH;
    t /= OH;
    const I m = t % M;
    const I n = t / M;
    const I c = m / mult;
    const T* xc = x + (n * C + c) * H * W;
    const float* wm = w + m * KH * KW;
    float acc = 0.0f;
    const I ih0 = oh * sh - ph, iw0 = ow * sw - pw;
    for (int kh = 0; kh < KH; ++kh) {
      const I ih = ih0 + kh * dh;
      if (ih < 0 || ih >= H) continue;
      const T* xr = xc + ih * W;
      for (int kw = 0; kw < KW; ++kw) {
        const I iw = iw0 + kw * dw;
        if (iw < 0 || iw >= W) continue;
        acc += to_f32(xr[iw]) * wm[kh * KW + kw];
      }
    }
    if (bias) acc += to_f32(bias[m]);
    if (z) acc += to_f32(z[i]);
    y[i] = from_f32<T>(apply_act(acc, ap));
  }
}

// NHWC: one thread per V output channels of one pixel, m fastest (coalesced). Weights
// float [KH*KW, M]. V > 1 only when mult == 1 (each output channel reads its own input
// channel), M % V == 0 and every pointer is 16-byte aligned.
template <typename T, typename I, int V>
__global__ void depthwise_nhwc_kernel(const T* __restrict__ x, const float* __restrict__ w, const T* __restrict__ bias,
                                      const T* __restrict__ z, T* __restrict__ y, I total, DwGeom g, ActParams ap) {
  const I OW = static_cast<I>(g.OW), OH = static_cast<I>(g.OH), M = static_cast<I>(g.M), H = static_cast<I>(g.H),
          W = static_cast<I>(g.W), C = static_cast<I>(g.C), mult = static_cast<I>(g.mult);
  const I sh = static_cast<I>(g.sh), sw = static_cast<I>(g.sw), dh = static_cast<I>(g.dh), dw = static_cast<I>(g.dw),
          ph = static_cast<I>(g.ph), pw = static_cast<I>(g.pw);
  const int KH = g.KH, KW = g.KW;
  const I Mv = M / V;  // total counts groups of V channels
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I t = i;
    const I m = (t % Mv) * V;
    t /= Mv;
    const I ow = t % OW;
    t /= OW;
    const I oh = t % OH;
    const I n = t / OH;
    const I c = m / mult;
    const T* xn = x + n * H * W * C + c;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    const I ih0 = oh * sh - ph, iw0 = ow * sw - pw;
    for (int kh = 0; kh < KH; ++kh) {
      const I ih = ih0 + kh * dh;
      if (ih < 0 || ih >= H) continue;
      const T* xr = xn + ih * W * C;
      const float* wr = w + kh * KW * M + m;
      for (int kw = 0; kw < KW; ++kw) {
        const I iw = iw0 + kw * dw;
        if (iw < 0 || iw >= W) continue;
        float xv[V], wv[V];
        load_f32<T, V>(xr + iw * C, xv);
        load_f32<float, V>(wr + kw * M, wv);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += xv[j] * wv[j];
      }
    }
    if (bias) {
      float bv[V];
      load_f32<T, V>(bias + m, bv);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += bv[j];
    }
    if (z) {
      float zv[V];
      load_f32<T, V>(z + i * V, zv);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += zv[j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = apply_act(acc[j], ap);
    store_f32<T, V>(y + i * V, acc);
  }
}

// Checks shared by both conv tactics: dtypes, attributes (and W when constant).
bool conv_common_supports(const LayerSpec& s) {
  if (s.op != Op::Conv && s.op != Op::FusedConv) return false;
  if (!s.attrs) return false;
  const Attributes& a = *s.attrs;
  const DataType dt = s.input_dtype(0);
  if (!is_cuda_float(dt) || s.input_dtype(1) != dt) return false;
  if (s.output_dtypes.size() != 1 || s.output_dtypes[0] != dt) return false;
  const size_t max_inputs = s.op == Op::FusedConv ? 4 : 3;
  if (s.input_dtypes.size() > max_inputs || s.input_dtypes.size() < 2) return false;
  for (size_t i = 2; i < s.input_dtypes.size(); ++i) {
    if (s.input_dtypes[i] != DataType::kUndefined && s.input_dtypes[i] != dt) return false;
  }
  bool nhwc = false;
  if (!parse_layout(a, &nhwc)) return false;
  Activation act;
  if (!parse_activation(s.op, a, &act)) return false;
  if (!known_auto_pad(a.get_string("auto_pad", "NOTSET"))) return false;
  const int64_t group = a.get_int("group", 1);
  if (group < 1) return false;
  if (const Tensor* w = s.constant(1)) {
    if (w->dtype() != dt || !conv_weight_fits(a, w->dims(), group)) return false;
  }
  return true;
}

}  // namespace

Status conv_shape(const Attributes& a, bool nhwc, int64_t group, const Dims& xd, const Dims& wd, ConvShape* s) {
  KILN_ENSURE(xd.size() >= 3 && xd.size() <= 5, "X must have rank 3..5, got ", dims_str(xd));
  KILN_ENSURE(wd.size() == xd.size(), "X ", dims_str(xd), " and W ", dims_str(wd), " ranks differ");
  const size_t nsp = xd.size() - 2;
  s->nsp = static_cast<int>(nsp);
  s->N = xd[0];
  s->C = nhwc ? xd.back() : xd[1];
  s->M = wd[0];
  KILN_ENSURE(group >= 1 && s->C == wd[1] * group, "X has ", s->C, " channels, W ", dims_str(wd), " and group ", group,
              " expect ", wd[1] * group);
  KILN_ENSURE(s->M % group == 0, "output channels ", s->M, " not divisible by group ", group);
  WindowGeometry g;
  g.in = nhwc ? Dims(xd.begin() + 1, xd.end() - 1) : Dims(xd.begin() + 2, xd.end());
  g.kernel.assign(wd.begin() + 2, wd.end());
  for (int64_t k : g.kernel) KILN_ENSURE(k >= 1, "W has an empty kernel axis: ", dims_str(wd));
  if (a.has("kernel_shape")) KILN_ENSURE(a.get_ints("kernel_shape") == g.kernel, "kernel_shape does not match W");
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", nsp, 1, 1, &g.strides));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "dilations", nsp, 1, 1, &g.dilations));
  KILN_RETURN_IF_ERROR(spatial_pads(a, nsp, &g.pads));
  KILN_RETURN_IF_ERROR(compute_window_geometry(a.get_string("auto_pad", "NOTSET"), false, &g));
  s->in = g.in;
  s->kernel = g.kernel;
  s->strides = g.strides;
  s->dilations = g.dilations;
  s->pads = g.pads;
  s->out = g.out;
  s->y_dims = {s->N};
  if (!nhwc) s->y_dims.push_back(s->M);
  s->y_dims.insert(s->y_dims.end(), g.out.begin(), g.out.end());
  if (nhwc) s->y_dims.push_back(s->M);
  return Status::ok();
}

bool conv_supports_common(const LayerSpec& s) { return conv_common_supports(s); }

Status epilogue(DataType dtype, void* y, const void* bias, const void* z, int64_t total, int64_t channels, int64_t inner,
                bool read_y, const Activation& act, cudaStream_t stream) {
  if (total <= 0) return Status::ok();
  if (channels < 1 || inner < 1) return internal_error("conv epilogue: bad channels/inner");
  const ActParams ap = to_params(act);
  return KILN_CUDA_FLOAT_DISPATCH(dtype, {
    epilogue_kernel<T><<<grid_for(total), 256, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias),
                                                            static_cast<const T*>(z), total, channels, inner, read_y,
                                                            ap);
    KILN_CUDA_LAUNCH_CHECK("conv epilogue");
    return Status::ok();
  });
}

Status pad_input(DataType dtype, const void* x, void* xp, int nsp, bool nhwc, int64_t N, int64_t C, const int64_t* in,
                 const int64_t* pad_begin, const int64_t* out, cudaStream_t stream) {
  if (nsp < 1 || nsp > 3) return internal_error("pad_input: ", nsp, " spatial axes");
  PadGeom g{};
  g.N = N;
  g.C = C;
  g.nhwc = nhwc;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = 1;
    g.out[d] = 1;
    g.pb[d] = 0;
  }
  int64_t total = N * C;
  for (int d = 0; d < nsp; ++d) {
    const int dd = 3 - nsp + d;
    g.in[dd] = in[d];
    g.out[dd] = out[d];
    g.pb[dd] = pad_begin[d];
    total *= out[d];
  }
  if (total <= 0) return Status::ok();
  switch (dtype_size(dtype)) {
    case 4:
      pad_kernel<float><<<grid_for(total), 256, 0, stream>>>(static_cast<const float*>(x), static_cast<float*>(xp),
                                                             total, g);
      break;
    case 2:
      pad_kernel<__half><<<grid_for(total), 256, 0, stream>>>(static_cast<const __half*>(x), static_cast<__half*>(xp),
                                                              total, g);
      break;
    default:
      return unsupported("pad_input: dtype ", dtype_name(dtype));
  }
  KILN_CUDA_LAUNCH_CHECK("conv pad");
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// kiln_cuda_depthwise
// ---------------------------------------------------------------------------------------

namespace {

class DepthwiseKernel final : public Kernel {
 public:
  explicit DepthwiseKernel(const LayerSpec& s) : attrs_(*s.attrs) {
    dtype_ = s.input_dtype(0);
    parse_layout(attrs_, &nhwc_);
    parse_activation(s.op, attrs_, &act_);
    group_ = attrs_.get_int("group", 1);
    has_bias_ = s.input_dtype(2) != DataType::kUndefined;
    has_z_ = s.input_dtype(3) != DataType::kUndefined;
    const Tensor& w = *s.constant(1);
    w_dims_ = w.dims();
    w_host_.resize(static_cast<size_t>(w.size()));
    for (int64_t i = 0; i < w.size(); ++i) w_host_[static_cast<size_t>(i)] = static_cast<float>(w.get_double(i));
  }

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* workspace_bytes) override {
    *workspace_bytes = 0;
    ready_ = false;
    KILN_ENSURE(!inputs.empty() && outputs.size() == 1, "kiln_cuda_depthwise: expected X and one output");
    const Dims& xd = inputs[0].dims;
    ConvShape s;
    KILN_RETURN_IF_ERROR(conv_shape(attrs_, nhwc_, group_, xd, w_dims_, &s));
    KILN_ENSURE(s.nsp <= 2, "kiln_cuda_depthwise: 1-D or 2-D only");
    KILN_ENSURE(s.C == group_ && w_dims_[1] == 1, "kiln_cuda_depthwise: not a depthwise conv");
    KILN_ENSURE(outputs[0].dims == s.y_dims, "kiln_cuda_depthwise: output ", dims_str(outputs[0].dims), ", expected ",
                dims_str(s.y_dims));
    if (has_bias_) {
      KILN_ENSURE(inputs.size() > 2 && num_elements(inputs[2].dims) == s.M, "kiln_cuda_depthwise: B must have ", s.M,
                  " elements");
    }
    if (has_z_) {
      KILN_ENSURE(inputs.size() > 3 && inputs[3].dims == s.y_dims,
                  "kiln_cuda_depthwise: residual Z must have the output's shape ", dims_str(s.y_dims));
    }
    DwGeom g{};
    g.N = s.N;
    g.C = s.C;
    g.M = s.M;
    g.mult = s.M / s.C > 0 ? s.M / s.C : 1;
    if (s.nsp == 1) {
      g.H = 1;
      g.W = s.in[0];
      g.OH = 1;
      g.OW = s.out[0];
      g.KH = 1;
      g.KW = static_cast<int>(s.kernel[0]);
      g.sh = 1;
      g.sw = s.strides[0];
      g.dh = 1;
      g.dw = s.dilations[0];
      g.ph = 0;
      g.pw = s.pads[0];
    } else {
      g.H = s.in[0];
      g.W = s.in[1];
      g.OH = s.out[0];
      g.OW = s.out[1];
      g.KH = static_cast<int>(s.kernel[0]);
      g.KW = static_cast<int>(s.kernel[1]);
      g.sh = s.strides[0];
      g.sw = s.strides[1];
      g.dh = s.dilations[0];
      g.dw = s.dilations[1];
      g.ph = s.pads[0];
      g.pw = s.pads[1];
    }
    KILN_ENSURE(static_cast<int64_t>(g.KH) * g.KW <= (int64_t{1} << 20), "kiln_cuda_depthwise: kernel too large");
    geom_ = g;
    total_ = num_elements(s.y_dims);
    // int32 index math when X and Y (and every intermediate product) stay below 2^31;
    // grid-stride increments may pass total by at most one grid, hence the margin.
    small_index_ = std::max(num_elements(xd), total_) < (int64_t{1} << 30);
    if (!w_uploaded_) {
      // Float weights: NCHW [M, K]; NHWC [K, M] (coalesced along m).
      const int64_t K = static_cast<int64_t>(g.KH) * g.KW;
      std::vector<float> w(w_host_.size());
      for (int64_t m = 0; m < g.M; ++m) {
        for (int64_t k = 0; k < K; ++k) {
          const float v = w_host_[static_cast<size_t>(m * K + k)];
          w[static_cast<size_t>(nhwc_ ? k * g.M + m : m * K + k)] = v;
        }
      }
      KILN_RETURN_IF_ERROR(w_dev_.upload(w.data(), w.size() * sizeof(float)));
      w_uploaded_ = true;
    }
    ready_ = true;
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* workspace,
                 cudaStream_t stream) override {
    if (!ready_) return internal_error("kiln_cuda_depthwise: enqueue() before a successful prepare()");
    if (total_ == 0) return Status::ok();
    const void* x = inputs[0]->raw();
    const Tensor* b = has_bias_ ? input_at(inputs, 2) : nullptr;
    const Tensor* z = has_z_ ? input_at(inputs, 3) : nullptr;
    void* y = outputs[0]->raw();
    const ActParams ap = to_params(act_);
    const float* w = w_dev_.as<float>();
    return KILN_CUDA_FLOAT_DISPATCH(dtype_, {
      const T* bp = b ? static_cast<const T*>(b->raw()) : nullptr;
      const T* zp = z ? static_cast<const T*>(z->raw()) : nullptr;
      const T* xp = static_cast<const T*>(x);
      T* yp = static_cast<T*>(y);
      constexpr int V = kVec<T>;
      const bool vec = nhwc_ && geom_.mult == 1 && geom_.M % V == 0 && aligned16(xp) && aligned16(yp) &&
                       aligned16(w) && (!bp || aligned16(bp)) && (!zp || aligned16(zp));
      const int64_t threads = vec ? total_ / V : total_;
      const unsigned blocks = grid_for(threads);
      if (small_index_) {
        const int32_t n = static_cast<int32_t>(threads);
        if (vec) depthwise_nhwc_kernel<T, int32_t, V><<<blocks, 256, 0, stream>>>(xp, w, bp, zp, yp, n, geom_, ap);
        else if (nhwc_) depthwise_nhwc_kernel<T, int32_t, 1><<<blocks, 256, 0, stream>>>(xp, w, bp, zp, yp, n, geom_, ap);
        else depthwise_nchw_kernel<T, int32_t><<<blocks, 256, 0, stream>>>(xp, w, bp, zp, yp, n, geom_, ap);
      } else {
        if (vec) depthwise_nhwc_kernel<T, int64_t, V><<<blocks, 256, 0, stream>>>(xp, w, bp, zp, yp, threads, geom_, ap);
        else if (nhwc_) depthwise_nhwc_kernel<T, int64_t, 1><<<blocks, 256, 0, stream>>>(xp, w, bp, zp, yp, threads, geom_, ap);
        else depthwise_nchw_kernel<T, int64_t><<<blocks, 256, 0, stream>>>(xp, w, bp, zp, yp, threads, geom_, ap);
      }
      KILN_CUDA_LAUNCH_CHECK("kiln_cuda_depthwise");
      return Status::ok();
    });
  }

 private:
  Attributes attrs_;
  DataType dtype_ = DataType::kFloat32;
  bool nhwc_ = false, has_bias_ = false, has_z_ = false;
  Activation act_;
  int64_t group_ = 1;
  Dims w_dims_;
  std::vector<float> w_host_;
  DeviceBuffer w_dev_;
  bool w_uploaded_ = false;
  bool ready_ = false;
  DwGeom geom_{};
  int64_t total_ = 0;
  bool small_index_ = false;
};

}  // namespace

bool depthwise_supports(const LayerSpec& s) {
  if (!conv_common_supports(s)) return false;
  const Tensor* w = s.constant(1);
  if (!w || (w->rank() != 3 && w->rank() != 4)) return false;
  const int64_t group = s.attrs->get_int("group", 1);
  // Depthwise: one input channel per group (W [M, 1, k...]), M a multiple of group.
  return w->dim(1) == 1 && w->dim(0) % group == 0;
}

Result<std::unique_ptr<Kernel>> depthwise_create(const LayerSpec& s) {
  if (!depthwise_supports(s)) return unsupported("kiln_cuda_depthwise: layer not supported");
  return std::unique_ptr<Kernel>(std::make_unique<DepthwiseKernel>(s));
}

// ---------------------------------------------------------------------------------------
// kiln_cuda_pool
// ---------------------------------------------------------------------------------------

namespace {

struct PoolGeom {
  int64_t N, C;
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];  // unused leading axes: extent 1
  bool nhwc;
  bool count_pad;
};

// One thread per output element, or (channels-last, V > 1) per V consecutive channels of
// one output position: C % V == 0 and X, Y 16-byte aligned.
template <typename T, bool kMax, typename I, int V>
__global__ void pool_kernel(const T* __restrict__ x, T* __restrict__ y, I total, PoolGeom g) {
  const I C = static_cast<I>(g.C);
  I in[3], out[3], k[3], st[3], dl[3], pb[3], pe[3];
  for (int d = 0; d < 3; ++d) {
    in[d] = static_cast<I>(g.in[d]);
    out[d] = static_cast<I>(g.out[d]);
    k[d] = static_cast<I>(g.k[d]);
    st[d] = static_cast<I>(g.s[d]);
    dl[d] = static_cast<I>(g.d[d]);
    pb[d] = static_cast<I>(g.pb[d]);
    pe[d] = static_cast<I>(g.pe[d]);
  }
  const I sp_total = in[0] * in[1] * in[2];
  const I cstride = g.nhwc ? C : 1;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I t = i, c = 0, o[3];
    if (g.nhwc) {
      c = (t % (C / V)) * V;
      t /= C / V;
    }
    o[2] = t % out[2];
    t /= out[2];
    o[1] = t % out[1];
    t /= out[1];
    o[0] = t % out[0];
    t /= out[0];
    if (!g.nhwc) {
      c = t % C;
      t /= C;
    }
    const I n = t;
    const T* xb = g.nhwc ? x + n * sp_total * C + c : x + (n * C + c) * sp_total;
    float best[V], sum[V];
#pragma unroll
    for (int j = 0; j < V; ++j) best[j] = sum[j] = 0.0f;
    bool any = false;
    I count = 0, padded = 0;
    for (I k0 = 0; k0 < k[0]; ++k0) {
      const I c0 = o[0] * st[0] - pb[0] + k0 * dl[0];
      const bool in0 = c0 >= 0 && c0 < in[0];
      const bool pad0 = c0 >= -pb[0] && c0 < in[0] + pe[0];
      for (I k1 = 0; k1 < k[1]; ++k1) {
        const I c1 = o[1] * st[1] - pb[1] + k1 * dl[1];
        const bool in1 = in0 && c1 >= 0 && c1 < in[1];
        const bool pad1 = pad0 && c1 >= -pb[1] && c1 < in[1] + pe[1];
        const T* xr = xb + (c0 * in[1] + c1) * in[2] * cstride;
        for (I k2 = 0; k2 < k[2]; ++k2) {
          const I c2 = o[2] * st[2] - pb[2] + k2 * dl[2];
          const bool inside = in1 && c2 >= 0 && c2 < in[2];
          if (pad1 && c2 >= -pb[2] && c2 < in[2] + pe[2]) ++padded;
          if (!inside) continue;
          float v[V];
          load_f32<T, V>(xr + c2 * cstride, v);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            if (kMax) {
              if (!any || v[j] > best[j]) best[j] = v[j];  // the reference: first tap, then strictly greater
            } else {
              sum[j] += v[j];
            }
          }
          any = true;
          ++count;
        }
      }
    }
    float r[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (kMax) {
        r[j] = any ? best[j] : 0.0f;
      } else {
        r[j] = sum[j] / static_cast<float>(g.count_pad ? padded : count);
      }
    }
    store_f32<T, V>(y + static_cast<int64_t>(i) * V, r);
  }
}

// Global pooling, NCHW: one warp per (n, c) plane.
template <typename T, bool kMax>
__global__ void global_pool_nchw_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t sp) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t p = blockIdx.x * warps_per_block + threadIdx.x / 32; p < planes;
       p += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const T* xp = x + p * sp;
    float acc = kMax ? -INFINITY : 0.0f;
    for (int64_t i = lane; i < sp; i += 32) {
      const float v = to_f32(xp[i]);
      acc = kMax ? fmaxf(acc, v) : acc + v;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = kMax ? fmaxf(acc, o) : acc + o;
    }
    if (lane == 0) y[p] = from_f32<T>(kMax ? acc : acc / static_cast<float>(sp));
  }
}

// Global pooling, NHWC: block (32 channels x 8 rows), grid (ceil(C/32), N).
template <typename T, bool kMax>
__global__ void global_pool_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t C, int64_t sp) {
  __shared__ float red[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t n = blockIdx.y;
  float acc = kMax ? -INFINITY : 0.0f;
  if (c < C) {
    const T* xn = x + n * sp * C + c;
    for (int64_t s = threadIdx.y; s < sp; s += 8) {
      const float v = to_f32(xn[s * C]);
      acc = kMax ? fmaxf(acc, v) : acc + v;
    }
  }
  red[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int r = 1; r < 8; ++r) acc = kMax ? fmaxf(acc, red[r][threadIdx.x]) : acc + red[r][threadIdx.x];
    y[n * C + c] = from_f32<T>(kMax ? acc : acc / static_cast<float>(sp));
  }
}

bool is_global(Op op) { return op == Op::GlobalAveragePool || op == Op::GlobalMaxPool; }
bool is_max(Op op) { return op == Op::MaxPool || op == Op::GlobalMaxPool; }

class PoolKernel final : public Kernel {
 public:
  explicit PoolKernel(const LayerSpec& s) : op_(s.op), attrs_(*s.attrs) {
    dtype_ = s.input_dtype(0);
    parse_layout(attrs_, &nhwc_);
  }

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* workspace_bytes) override {
    *workspace_bytes = 0;
    ready_ = false;
    KILN_ENSURE(!inputs.empty() && !outputs.empty(), "kiln_cuda_pool: expected X and an output");
    const Dims& xd = inputs[0].dims;
    KILN_ENSURE(xd.size() >= 3, "kiln_cuda_pool: X must have rank >= 3, got ", dims_str(xd));
    const size_t nsp = xd.size() - 2;
    N_ = xd[0];
    C_ = nhwc_ ? xd.back() : xd[1];
    const Dims in = nhwc_ ? Dims(xd.begin() + 1, xd.end() - 1) : Dims(xd.begin() + 2, xd.end());
    Dims yd;
    if (is_global(op_)) {
      sp_ = num_elements(in);
      yd.assign(xd.size(), 1);
      yd[0] = N_;
      yd[nhwc_ ? xd.size() - 1 : 1] = C_;
      if (is_max(op_)) KILN_ENSURE(sp_ > 0 || N_ * C_ == 0, "GlobalMaxPool of an empty spatial extent");
    } else {
      KILN_ENSURE(nsp <= 3, "kiln_cuda_pool: at most 3 spatial axes");
      WindowGeometry g;
      KILN_ENSURE(attrs_.has("kernel_shape"), "attribute 'kernel_shape' is required");
      KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "kernel_shape", nsp, 1, 1, &g.kernel));
      KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "strides", nsp, 1, 1, &g.strides));
      KILN_RETURN_IF_ERROR(spatial_ints(attrs_, "dilations", nsp, 1, 1, &g.dilations));
      KILN_RETURN_IF_ERROR(spatial_pads(attrs_, nsp, &g.pads));
      g.in = in;
      const bool ceil_mode = attrs_.get_int("ceil_mode", 0) != 0;
      KILN_RETURN_IF_ERROR(compute_window_geometry(attrs_.get_string("auto_pad", "NOTSET"), ceil_mode, &g));
      int64_t taps = 1;
      for (int64_t k : g.kernel) taps *= k;
      KILN_ENSURE(taps <= (int64_t{1} << 24), "kiln_cuda_pool: kernel too large");
      PoolGeom pg{};
      pg.N = N_;
      pg.C = C_;
      pg.nhwc = nhwc_;
      pg.count_pad = attrs_.get_int("count_include_pad", 0) != 0;
      for (int d = 0; d < 3; ++d) {
        pg.in[d] = pg.out[d] = pg.k[d] = pg.s[d] = pg.d[d] = 1;
        pg.pb[d] = pg.pe[d] = 0;
      }
      for (size_t d = 0; d < nsp; ++d) {
        const size_t dd = 3 - nsp + d;
        pg.in[dd] = g.in[d];
        pg.out[dd] = g.out[d];
        pg.k[dd] = g.kernel[d];
        pg.s[dd] = g.strides[d];
        pg.d[dd] = g.dilations[d];
        pg.pb[dd] = g.pads[d];
        pg.pe[dd] = g.pads[nsp + d];
      }
      geom_ = pg;
      yd = {N_};
      if (!nhwc_) yd.push_back(C_);
      yd.insert(yd.end(), g.out.begin(), g.out.end());
      if (nhwc_) yd.push_back(C_);
    }
    KILN_ENSURE(outputs[0].dims == yd, "kiln_cuda_pool: output ", dims_str(outputs[0].dims), ", expected ",
                dims_str(yd));
    KILN_ENSURE(N_ <= 65535 || !(is_global(op_) && nhwc_), "kiln_cuda_pool: batch too large for the NHWC global pool");
    total_ = num_elements(yd);
    // int32 index math when X and Y stay well below 2^31 elements (also the padded extents).
    double padded_x = static_cast<double>(N_) * static_cast<double>(C_);
    for (int d = 0; d < 3; ++d) {
      padded_x *= static_cast<double>(geom_.in[d] + geom_.pb[d] + geom_.pe[d]) + static_cast<double>(geom_.k[d]) *
                                                                                      static_cast<double>(geom_.d[d]);
    }
    small_index_ = std::max(num_elements(xd), total_) < (int64_t{1} << 30) && padded_x < 1e9;
    ready_ = true;
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* workspace,
                 cudaStream_t stream) override {
    if (!ready_) return internal_error("kiln_cuda_pool: enqueue() before a successful prepare()");
    if (total_ == 0) return Status::ok();
    const void* x = inputs[0]->raw();
    void* y = outputs[0]->raw();
    const bool mx = is_max(op_);
    return KILN_CUDA_FLOAT_DISPATCH(dtype_, {
      const T* xp = static_cast<const T*>(x);
      T* yp = static_cast<T*>(y);
      if (is_global(op_)) {
        if (!nhwc_) {
          const int64_t planes = N_ * C_;
          const unsigned blocks = blocks_for(planes, 8);
          if (mx) global_pool_nchw_kernel<T, true><<<blocks, 256, 0, stream>>>(xp, yp, planes, sp_);
          else global_pool_nchw_kernel<T, false><<<blocks, 256, 0, stream>>>(xp, yp, planes, sp_);
        } else {
          const dim3 block(32, 8);
          const dim3 grid(static_cast<unsigned>((C_ + 31) / 32), static_cast<unsigned>(N_));
          if (mx) global_pool_nhwc_kernel<T, true><<<grid, block, 0, stream>>>(xp, yp, C_, sp_);
          else global_pool_nhwc_kernel<T, false><<<grid, block, 0, stream>>>(xp, yp, C_, sp_);
        }
      } else {
        constexpr int V = kVec<T>;
        if (nhwc_ && C_ % V == 0 && aligned16(xp) && aligned16(yp)) {
          const int64_t threads = total_ / V;
          const unsigned blocks = grid_for(threads);
          if (small_index_) {
            const int32_t n = static_cast<int32_t>(threads);
            if (mx) pool_kernel<T, true, int32_t, V><<<blocks, 256, 0, stream>>>(xp, yp, n, geom_);
            else pool_kernel<T, false, int32_t, V><<<blocks, 256, 0, stream>>>(xp, yp, n, geom_);
          } else {
            if (mx) pool_kernel<T, true, int64_t, V><<<blocks, 256, 0, stream>>>(xp, yp, threads, geom_);
            else pool_kernel<T, false, int64_t, V><<<blocks, 256, 0, stream>>>(xp, yp, threads, geom_);
          }
        } else {
          const unsigned blocks = grid_for(total_);
          if (small_index_) {
            const int32_t n = static_cast<int32_t>(total_);
            if (mx) pool_kernel<T, true, int32_t, 1><<<blocks, 256, 0, stream>>>(xp, yp, n, geom_);
            else pool_kernel<T, false, int32_t, 1><<<blocks, 256, 0, stream>>>(xp, yp, n, geom_);
          } else {
            if (mx) pool_kernel<T, true, int64_t, 1><<<blocks, 256, 0, stream>>>(xp, yp, total_, geom_);
            else pool_kernel<T, false, int64_t, 1><<<blocks, 256, 0, stream>>>(xp, yp, total_, geom_);
          }
        }
      }
      KILN_CUDA_LAUNCH_CHECK("kiln_cuda_pool");
      return Status::ok();
    });
  }

 private:
  Op op_;
  Attributes attrs_;
  DataType dtype_ = DataType::kFloat32;
  bool nhwc_ = false;
  bool ready_ = false;
  int64_t N_ = 0, C_ = 0, sp_ = 0, total_ = 0;
  PoolGeom geom_{};
  bool small_index_ = false;
};

}  // namespace

bool pool_supports(const LayerSpec& s) {
  if (s.op != Op::MaxPool && s.op != Op::AveragePool && s.op != Op::GlobalAveragePool && s.op != Op::GlobalMaxPool) {
    return false;
  }
  if (!s.attrs || s.input_dtypes.size() != 1) return false;
  const DataType dt = s.input_dtype(0);
  if (!is_cuda_float(dt)) return false;
  if (s.output_dtypes.empty() || s.output_dtypes[0] != dt) return false;
  // MaxPool's Indices output is not computed: decline when it is wanted.
  for (size_t i = 1; i < s.output_dtypes.size(); ++i) {
    if (s.output_dtypes[i] != DataType::kUndefined) return false;
  }
  const Attributes& a = *s.attrs;
  bool nhwc = false;
  if (!parse_layout(a, &nhwc)) return false;
  if (is_global(s.op)) return true;
  if (!a.has("kernel_shape")) return false;
  const Dims ks = a.get_ints("kernel_shape");
  if (ks.empty() || ks.size() > 3) return false;
  const size_t nsp = ks.size();
  Dims v;
  if (!spatial_ints(a, "kernel_shape", nsp, 1, 1, &v).is_ok()) return false;
  if (!spatial_ints(a, "strides", nsp, 1, 1, &v).is_ok()) return false;
  if (!spatial_ints(a, "dilations", nsp, 1, 1, &v).is_ok()) return false;
  if (!spatial_pads(a, nsp, &v).is_ok()) return false;
  if (!known_auto_pad(a.get_string("auto_pad", "NOTSET"))) return false;
  const int64_t so = a.get_int("storage_order", 0);
  return so == 0 || so == 1;
}

Result<std::unique_ptr<Kernel>> pool_create(const LayerSpec& s) {
  if (!pool_supports(s)) return unsupported("kiln_cuda_pool: layer not supported");
  return std::unique_ptr<Kernel>(std::make_unique<PoolKernel>(s));
}

}  // namespace kiln::cuda::conv
