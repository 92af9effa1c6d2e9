// kiln's fast elementwise kernels (float32): unary math and activations, binary ops with
// numpy broadcasting, and FusedElementwise programs evaluated block by block.
//
// Formulas follow the reference kernels (elementwise_unary.cpp, elementwise.cpp) term for
// term; exp, tanh, erf and sigmoid use the vectorizable approximations of fast_common.h
// (a few ulp), the rest is the same IEEE float arithmetic or libm call.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_common.h"
#include "ir/elementwise_expr.h"

namespace kiln::fast {

namespace {

using namespace detail;

// ---- unary ops ----

enum class Unary : uint8_t {
  kCopy, kAbs, kNeg, kSign, kExp, kLog, kSqrt, kReciprocal, kFloor, kCeil, kRound, kSin, kCos, kTan, kAsin,
  kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh, kErf, kRelu, kLeakyRelu, kElu, kSelu, kCelu,
  kThresholdedRelu, kSigmoid, kHardSigmoid, kHardSwish, kTanh, kGelu, kGeluTanh, kSoftplus, kSoftsign, kMish,
  kSwish, kClip, kSquare, kPowHalf, kPowConst, kDivConst,
};

// A unary op and its parameters (alpha/beta, clip bounds, exponent, divisor).
struct UnaryOp {
  Unary kind = Unary::kCopy;
  float a = 0, b = 0;
};

// Roughly how expensive an element is: 1 plain arithmetic, 2 vectorized transcendental,
// 3 a scalar libm call. Decides when threads pay off.
int unary_cost(Unary k) {
  switch (k) {
    case Unary::kCopy: case Unary::kAbs: case Unary::kNeg: case Unary::kSign: case Unary::kSqrt:
    case Unary::kReciprocal: case Unary::kRelu: case Unary::kLeakyRelu: case Unary::kThresholdedRelu:
    case Unary::kHardSigmoid: case Unary::kHardSwish: case Unary::kSoftsign: case Unary::kClip:
    case Unary::kSquare: case Unary::kPowHalf: case Unary::kDivConst:
      return 1;
    case Unary::kExp: case Unary::kErf: case Unary::kSelu: case Unary::kSigmoid: case Unary::kTanh:
    case Unary::kGelu: case Unary::kGeluTanh: case Unary::kSwish:
      return 2;
    default:
      return 3;
  }
}

// The unary op of a node with attributes (Clip and Pow need their constant inputs and are
// handled by the callers).
bool unary_from_node(Op op, const Attributes& at, UnaryOp* u) {
  UnaryOp r;
  switch (op) {
    case Op::Identity: r.kind = Unary::kCopy; break;
    case Op::Abs: r.kind = Unary::kAbs; break;
    case Op::Neg: r.kind = Unary::kNeg; break;
    case Op::Sign: r.kind = Unary::kSign; break;
    case Op::Exp: r.kind = Unary::kExp; break;
    case Op::Log: r.kind = Unary::kLog; break;
    case Op::Sqrt: r.kind = Unary::kSqrt; break;
    case Op::Reciprocal: r.kind = Unary::kReciprocal; break;
    case Op::Floor: r.kind = Unary::kFloor; break;
    case Op::Ceil: r.kind = Unary::kCeil; break;
    case Op::Round: r.kind = Unary::kRound; break;
    case Op::Sin: r.kind = Unary::kSin; break;
    case Op::Cos: r.kind = Unary::kCos; break;
    case Op::Tan: r.kind = Unary::kTan; break;
    case Op::Asin: r.kind = Unary::kAsin; break;
    case Op::Acos: r.kind = Unary::kAcos; break;
    case Op::Atan: r.kind = Unary::kAtan; break;
    case Op::Sinh: r.kind = Unary::kSinh; break;
    case Op::Cosh: r.kind = Unary::kCosh; break;
    case Op::Asinh: r.kind = Unary::kAsinh; break;
    case Op::Acosh: r.kind = Unary::kAcosh; break;
    case Op::Atanh: r.kind = Unary::kAtanh; break;
    case Op::Erf: r.kind = Unary::kErf; break;
    case Op::Relu: r.kind = Unary::kRelu; break;
    case Op::LeakyRelu: r.kind = Unary::kLeakyRelu; r.a = at.get_float("alpha", 0.01f); break;
    case Op::Elu: r.kind = Unary::kElu; r.a = at.get_float("alpha", 1.0f); break;
    case Op::Selu:
      r.kind = Unary::kSelu;
      r.a = at.get_float("alpha", 1.67326319217681884765625f);
      r.b = at.get_float("gamma", 1.05070102214813232421875f);
      break;
    case Op::Celu:
      r.kind = Unary::kCelu;
      r.a = at.get_float("alpha", 1.0f);
      if (r.a == 0.0f) return false;  // the reference rejects it
      break;
    case Op::ThresholdedRelu: r.kind = Unary::kThresholdedRelu; r.a = at.get_float("alpha", 1.0f); break;
    case Op::Sigmoid: r.kind = Unary::kSigmoid; break;
    case Op::HardSigmoid:
      r.kind = Unary::kHardSigmoid;
      r.a = at.get_float("alpha", 0.2f);
      r.b = at.get_float("beta", 0.5f);
      break;
    case Op::HardSwish: r.kind = Unary::kHardSwish; break;
    case Op::Tanh: r.kind = Unary::kTanh; break;
    case Op::Gelu: {
      const std::string approx = at.get_string("approximate", "none");
      if (approx == "none") r.kind = Unary::kGelu;
      else if (approx == "tanh") r.kind = Unary::kGeluTanh;
      else return false;
      break;
    }
    case Op::Softplus: r.kind = Unary::kSoftplus; break;
    case Op::Softsign: r.kind = Unary::kSoftsign; break;
    case Op::Mish: r.kind = Unary::kMish; break;
    case Op::Swish: r.kind = Unary::kSwish; r.a = at.get_float("alpha", 1.0f); break;
    default: return false;
  }
  *u = r;
  return true;
}

// Pow(x, e) for a constant e; the reference computes std::pow in double.
UnaryOp pow_as_unary(float e) {
  if (e == 1.0f) return {Unary::kCopy, 0, 0};
  if (e == 2.0f) return {Unary::kSquare, 0, 0};  // exact in double, so one float rounding
  if (e == 0.5f) return {Unary::kPowHalf, 0, 0};
  return {Unary::kPowConst, e, 0};
}

float softplus_s(float v) { return v > 0.0f ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); }

// std::max(0, std::min(1, t)) spelled out, NaN behaviour included (NaN gives 1).
KILN_FAST_INLINE float hard_sigmoid(float t) {
  const float m = select(t < 1.0f, t, 1.0f);
  return select(0.0f < m, m, 0.0f);
}

KILN_FAST_INLINE float gelu_tanh(float v) {
  const float k = 0.797884524f;  // std::sqrt(2.0f / pi) in float, the reference's value
  return 0.5f * v * (1.0f + tanh_f(k * (v + 0.044715f * v * v * v)));
}

// y[i] = u(x[i]) for i < n. x and y do not overlap.
KILN_FAST_CLONES void unary_span(UnaryOp u, const float* __restrict x, float* __restrict y, int64_t n) {
  const float a = u.a, b = u.b;
#define KILN_UNARY(KIND, EXPR)                \
  case Unary::KIND:                           \
    for (int64_t i = 0; i < n; ++i) {         \
      const float v = x[i];                   \
      y[i] = (EXPR);                          \
    }                                         \
    break;
  switch (u.kind) {
    KILN_UNARY(kCopy, v)
    KILN_UNARY(kAbs, std::fabs(v))
    KILN_UNARY(kNeg, -v)
    KILN_UNARY(kSign, select(v > 0.0f, 1.0f, select(v < 0.0f, -1.0f, select(v != v, v, 0.0f))))
    KILN_UNARY(kExp, exp_f(v))
    KILN_UNARY(kLog, std::log(v))
    KILN_UNARY(kSqrt, std::sqrt(v))
    KILN_UNARY(kReciprocal, 1.0f / v)
    KILN_UNARY(kFloor, std::floor(v))
    KILN_UNARY(kCeil, std::ceil(v))
    KILN_UNARY(kRound, std::nearbyint(v))
    KILN_UNARY(kSin, std::sin(v))
    KILN_UNARY(kCos, std::cos(v))
    KILN_UNARY(kTan, std::tan(v))
    KILN_UNARY(kAsin, std::asin(v))
    KILN_UNARY(kAcos, std::acos(v))
    KILN_UNARY(kAtan, std::atan(v))
    KILN_UNARY(kSinh, std::sinh(v))
    KILN_UNARY(kCosh, std::cosh(v))
    KILN_UNARY(kAsinh, std::asinh(v))
    KILN_UNARY(kAcosh, std::acosh(v))
    KILN_UNARY(kAtanh, std::atanh(v))
    KILN_UNARY(kErf, erf_f(v))
    // NaN passes through, like the reference's numpy-style maximum(x, 0).
    KILN_UNARY(kRelu, select(v < 0.0f, 0.0f, v))
    KILN_UNARY(kLeakyRelu, select(v < 0.0f, a * v, v))
    KILN_UNARY(kElu, v < 0.0f ? a * std::expm1(v) : v)
    KILN_UNARY(kSelu, select(v > 0.0f, b * v, b * (a * exp_f(v) - a)))
    KILN_UNARY(kCelu, select(0.0f < v, v, 0.0f) + std::min(0.0f, a * std::expm1(v / a)))
    KILN_UNARY(kThresholdedRelu, select(v > a, v, 0.0f))
    KILN_UNARY(kSigmoid, sigmoid_f(v))
    KILN_UNARY(kHardSigmoid, hard_sigmoid(a * v + b))
    KILN_UNARY(kHardSwish, v * hard_sigmoid(v / 6.0f + 0.5f))
    KILN_UNARY(kTanh, tanh_f(v))
    KILN_UNARY(kGelu, 0.5f * v * (1.0f + erf_f(v / std::numbers::sqrt2_v<float>)))
    KILN_UNARY(kGeluTanh, gelu_tanh(v))
    KILN_UNARY(kSoftplus, softplus_s(v))
    KILN_UNARY(kSoftsign, v / (1.0f + std::fabs(v)))
    KILN_UNARY(kMish, v * std::tanh(softplus_s(v)))
    KILN_UNARY(kSwish, v * sigmoid_f(a * v))
    KILN_UNARY(kClip, select(select(v < a, a, v) > b, b, select(v < a, a, v)))
    KILN_UNARY(kSquare, v * v)
    // pow(-inf, 0.5) is +inf where sqrt gives NaN; pow(-0, 0.5) is +0.
    KILN_UNARY(kPowHalf, select(v == -kInf, kInf, std::sqrt(v) + 0.0f))
    KILN_UNARY(kPowConst, static_cast<float>(std::pow(static_cast<double>(v), static_cast<double>(a))))
    KILN_UNARY(kDivConst, v / a)
  }
#undef KILN_UNARY
}

// ---- binary ops ----

enum class Binary : uint8_t { kAdd, kSub, kMul, kDiv, kPow, kPRelu, kMax, kMin, kMean };

// Loops of y = f(a, b) for the four stride patterns (1: contiguous, 0: one broadcast value).
template <typename F>
inline void binary_loops(F f, const float* __restrict a, int64_t sa, const float* __restrict b, int64_t sb,
                         float* __restrict y, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else if (sa == 1) {
    const float bv = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
  } else if (sb == 1) {
    const float av = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
  } else {
    const float v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

KILN_FAST_CLONES void binary_span(Binary k, const float* __restrict a, int64_t sa, const float* __restrict b,
                                  int64_t sb, float* __restrict y, int64_t n) {
  switch (k) {
    case Binary::kAdd: binary_loops([](float p, float q) { return p + q; }, a, sa, b, sb, y, n); break;
    case Binary::kSub: binary_loops([](float p, float q) { return p - q; }, a, sa, b, sb, y, n); break;
    case Binary::kMul: binary_loops([](float p, float q) { return p * q; }, a, sa, b, sb, y, n); break;
    case Binary::kDiv: binary_loops([](float p, float q) { return p / q; }, a, sa, b, sb, y, n); break;
    case Binary::kMean: binary_loops([](float p, float q) { return (p + q) / 2.0f; }, a, sa, b, sb, y, n); break;
    case Binary::kPRelu: binary_loops([](float p, float q) { return select(p < 0.0f, q * p, p); }, a, sa, b, sb, y, n); break;
    // Max/Min: a NaN operand wins (the first one), as in the reference's fold.
    case Binary::kMax:
      binary_loops([](float p, float q) { return select(p != p, p, select(q != q, q, select(q > p, q, p))); },
                   a, sa, b, sb, y, n);
      break;
    case Binary::kMin:
      binary_loops([](float p, float q) { return select(p != p, p, select(q != q, q, select(q < p, q, p))); },
                   a, sa, b, sb, y, n);
      break;
    case Binary::kPow:
      binary_loops([](float p, float q) { return static_cast<float>(std::pow(static_cast<double>(p), static_cast<double>(q))); },
                   a, sa, b, sb, y, n);
      break;
  }
}

// ---- broadcasting geometry ----

// How the output of an elementwise op maps onto its (numpy-broadcast) inputs. Dimensions
// are collapsed where every input is either full or broadcast along both, so the last
// collapsed dimension ("inner") is contiguous (stride 1) or broadcast (stride 0) in each
// input. The output is cut into items: a run of at most `span` elements of one inner row.
class BroadcastPlan {
 public:
  Status init(const std::vector<Dims>& ins, const Dims& out, int64_t span = 16384) {
    nin_ = ins.size();
    const size_t r = out.size();
    std::vector<std::vector<bool>> full(nin_, std::vector<bool>(r, false));
    for (size_t k = 0; k < nin_; ++k) {
      KILN_ENSURE(ins[k].size() <= r, "input ", k, " ", dims_str(ins[k]), " has more dimensions than the output ",
                  dims_str(out));
      const size_t lead = r - ins[k].size();
      for (size_t d = 0; d < ins[k].size(); ++d) {
        const int64_t id = ins[k][d], od = out[lead + d];
        KILN_ENSURE(id == od || id == 1, "input ", k, " ", dims_str(ins[k]), " does not broadcast to ", dims_str(out));
        full[k][lead + d] = id == od && od != 1;
      }
    }
    // Collapse: drop size-1 output dims, merge neighbours with the same full/broadcast pattern.
    std::vector<int64_t> cdims;
    std::vector<std::vector<bool>> cfull(nin_);
    for (size_t d = 0; d < r; ++d) {
      if (out[d] == 1) continue;
      bool same = !cdims.empty();
      for (size_t k = 0; k < nin_ && same; ++k) same = cfull[k].back() == full[k][d];
      if (same) {
        cdims.back() *= out[d];
      } else {
        cdims.push_back(out[d]);
        for (size_t k = 0; k < nin_; ++k) cfull[k].push_back(full[k][d]);
      }
    }
    if (cdims.empty()) {
      cdims.push_back(1);
      for (size_t k = 0; k < nin_; ++k) cfull[k].push_back(false);
    }
    const size_t cr = cdims.size();
    strides_.assign(nin_ * cr, 0);
    for (size_t k = 0; k < nin_; ++k) {
      int64_t s = 1;
      for (size_t d = cr; d-- > 0;) {
        if (cfull[k][d]) {
          strides_[k * cr + d] = s;
          s *= cdims[d];
        }
      }
    }
    rank_ = cr;
    dims_ = cdims;
    inner_ = cdims.back();
    size_ = num_elements(out);
    rows_ = inner_ > 0 ? size_ / inner_ : 0;
    span_ = std::max<int64_t>(1, std::min(span, inner_));
    pieces_ = inner_ > 0 ? (inner_ + span_ - 1) / span_ : 0;
    return Status::ok();
  }
  int64_t size() const { return size_; }
  int64_t items() const { return rows_ * pieces_; }
  int64_t inner_stride(size_t k) const { return strides_[k * rank_ + rank_ - 1]; }
  // Item `item`: input offsets, output offset and length.
  void item_span(int64_t item, int64_t* offs, int64_t* out_off, int64_t* len) const {
    const int64_t row = item / pieces_, begin = (item % pieces_) * span_;
    *len = std::min(span_, inner_ - begin);
    *out_off = row * inner_ + begin;
    for (size_t k = 0; k < nin_; ++k) offs[k] = begin * strides_[k * rank_ + rank_ - 1];
    int64_t rem = row;
    for (size_t d = rank_ - 1; d-- > 0 && rem > 0;) {
      const int64_t idx = rem % dims_[d];
      rem /= dims_[d];
      for (size_t k = 0; k < nin_; ++k) offs[k] += idx * strides_[k * rank_ + d];
    }
  }

 private:
  size_t nin_ = 0, rank_ = 1;
  std::vector<int64_t> dims_, strides_;  // strides_[k * rank_ + d]
  int64_t inner_ = 1, size_ = 0, rows_ = 0, span_ = 1, pieces_ = 0;
};

// ---- spec checks ----

bool inputs_f32(const LayerSpec& spec) {
  for (size_t i = 0; i < spec.input_dtypes.size(); ++i) {
    if (spec.input_dtypes[i] != DataType::kFloat32) return false;
  }
  return !spec.input_dtypes.empty();
}

bool single_f32_output(const LayerSpec& spec) {
  return spec.output_dtypes.size() == 1 && spec.output_dtypes[0] == DataType::kFloat32;
}

// Reads a one-element numeric constant as float (Clip bounds, Pow exponents).
bool scalar_constant(const Tensor* t, float* v) {
  if (!t || t->size() != 1 || t->is_string() || is_low_precision(t->dtype())) return false;
  return dispatch_all(t->dtype(), [&]<typename B>() { *v = convert_element<float>(t->data<B>()[0]); });
}

// ---- unary kernel ----

class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(UnaryOp u, int threads) : u_(u), threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    KILN_ENSURE(!in.empty() && !out.empty() && in[0].dims == out[0].dims, "unary op: input and output shapes differ");
    n_ = num_elements(out[0].dims);
    return Status::ok();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    const float* x = in[0]->data<float>();
    float* y = out[0]->data<float>();
    constexpr int64_t kChunk = 8192;
    const int64_t chunks = (n_ + kChunk - 1) / kChunk;
    const int cost = unary_cost(u_.kind);
    const int nt = threads_for(n_, threads_, cost == 1 ? 65536 : cost == 2 ? 8192 : 2048);
    const int64_t n = n_;
    const UnaryOp u = u_;
    parallel_for(chunks, nt, [=](int64_t c) {
      const int64_t b = c * kChunk;
      unary_span(u, x + b, y + b, std::min(kChunk, n - b));
    });
    return Status::ok();
  }

 private:
  UnaryOp u_;
  int threads_;
  int64_t n_ = 0;
};

// The unary op of a layer: a plain unary op, Clip with constant bounds, Pow with a constant
// exponent. False when the layer is none of these.
bool layer_unary(const LayerSpec& spec, UnaryOp* u) {
  if (spec.op == Op::Clip) {
    u->kind = Unary::kClip;
    u->a = -kInf;
    u->b = kInf;
    for (size_t i = 1; i < 3; ++i) {
      if (!spec.has_input(i)) continue;
      if (!scalar_constant(spec.constant(i), i == 1 ? &u->a : &u->b)) return false;
    }
    return true;
  }
  float e;
  if (spec.op == Op::Pow) {
    if (!scalar_constant(spec.constant(1), &e)) return false;
    *u = pow_as_unary(e);
    return true;
  }
  return spec.input_dtypes.size() == 1 && unary_from_node(spec.op, spec.attributes(), u);
}

bool unary_supports(const LayerSpec& spec) {
  UnaryOp u;
  return single_f32_output(spec) && spec.input_dtype(0) == DataType::kFloat32 && layer_unary(spec, &u);
}

Result<std::unique_ptr<Kernel>> unary_create(const LayerSpec& spec) {
  UnaryOp u;
  if (!unary_supports(spec) || !layer_unary(spec, &u)) return unsupported("kiln_elementwise: unsupported layer");
  return std::unique_ptr<Kernel>(new UnaryKernel(u, spec.threads));
}

// ---- binary kernel ----

class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(Binary kind, int threads) : kind_(kind), threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    *scratch = 0;
    KILN_ENSURE(in.size() >= 2 && !out.empty(), "binary op: expected two inputs");
    // PRelu broadcasts the slope to X only (the output has X's shape).
    KILN_ENSURE(kind_ != Binary::kPRelu || in[0].dims == out[0].dims, "PRelu: slope does not broadcast to X");
    return plan_.init({in[0].dims, in[1].dims}, out[0].dims);
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void*) override {
    const float* a = in[0]->data<float>();
    const float* b = in[1]->data<float>();
    float* y = out[0]->data<float>();
    const int64_t sa = plan_.inner_stride(0), sb = plan_.inner_stride(1);
    const int nt = threads_for(plan_.size(), threads_, kind_ == Binary::kPow ? 2048 : 65536);
    parallel_for(plan_.items(), nt, [&](int64_t item) {
      int64_t offs[2], out_off, len;
      plan_.item_span(item, offs, &out_off, &len);
      binary_span(kind_, a + offs[0], sa, b + offs[1], sb, y + out_off, len);
    });
    return Status::ok();
  }

 private:
  Binary kind_;
  int threads_;
  BroadcastPlan plan_;
};

bool binary_kind(Op op, size_t num_inputs, Binary* k) {
  if (num_inputs != 2) return false;
  switch (op) {
    case Op::Add: case Op::Sum: *k = Binary::kAdd; return true;
    case Op::Sub: *k = Binary::kSub; return true;
    case Op::Mul: *k = Binary::kMul; return true;
    case Op::Div: *k = Binary::kDiv; return true;
    case Op::Pow: *k = Binary::kPow; return true;
    case Op::PRelu: *k = Binary::kPRelu; return true;
    case Op::Max: *k = Binary::kMax; return true;
    case Op::Min: *k = Binary::kMin; return true;
    case Op::Mean: *k = Binary::kMean; return true;
    default: return false;
  }
}

bool binary_supports(const LayerSpec& spec) {
  Binary k;
  if (!single_f32_output(spec) || !binary_kind(spec.op, spec.input_dtypes.size(), &k)) return false;
  UnaryOp u;  // Pow with a constant scalar exponent of any numeric dtype
  if (spec.op == Op::Pow && spec.input_dtype(0) == DataType::kFloat32 && layer_unary(spec, &u)) return true;
  return inputs_f32(spec);
}

Result<std::unique_ptr<Kernel>> binary_create(const LayerSpec& spec) {
  Binary k;
  if (!binary_supports(spec) || !binary_kind(spec.op, spec.input_dtypes.size(), &k)) {
    return unsupported("kiln_elementwise: unsupported layer");
  }
  UnaryOp u;
  if (spec.op == Op::Pow && layer_unary(spec, &u)) return std::unique_ptr<Kernel>(new UnaryKernel(u, spec.threads));
  return std::unique_ptr<Kernel>(new BinaryKernel(k, spec.threads));
}

// ---- FusedElementwise ----

// Output elements evaluated per block: the temps of a block stay in L1.
constexpr int64_t kBlock = 512;

// An operand of a fused step: a temp buffer (>= 0) or input i (encoded -1 - i).
struct FusedStep {
  bool binary = false;
  UnaryOp u;
  Binary b = Binary::kAdd;
  int dst = 0;  // temp buffer; -1: the output
  int src[2] = {0, 0};
};

struct FusedProgram {
  int num_inputs = 0;
  int num_temps = 0;
  std::vector<FusedStep> steps;
  // Floats of scratch per thread: the temps and a materialized copy of each input.
  size_t scratch_floats() const { return static_cast<size_t>(num_temps + num_inputs) * kBlock; }
};

// Translates the node's expr into steps over temp buffers (reused once dead). Fails for
// anything the fast path does not do: the reference kernel then runs the node.
Result<FusedProgram> compile_fused_program(const LayerSpec& spec) {
  const Attribute* a = spec.attributes().find("expr");
  if (!a || a->type() != AttrType::kString) return invalid_argument("FusedElementwise: no expr");
  KILN_ASSIGN_OR_RETURN(ElementwiseProgram p, parse_elementwise_expr(std::get<std::string>(a->value)));
  if (p.num_inputs > static_cast<int>(spec.input_dtypes.size())) return invalid_argument("FusedElementwise: too few inputs");
  const size_t n = p.instrs.size();
  // Live statements: those the output depends on.
  std::vector<bool> live(n, false);
  live[static_cast<size_t>(p.output)] = true;
  for (size_t k = n; k-- > 0;) {
    if (!live[k]) continue;
    for (const ExprArg& arg : p.instrs[k].args) {
      if (arg.kind == ExprArg::Kind::kTemp) live[static_cast<size_t>(arg.index)] = true;
    }
  }
  std::vector<size_t> last_use(n, 0);
  for (size_t k = 0; k < n; ++k) {
    if (!live[k]) continue;
    for (const ExprArg& arg : p.instrs[k].args) {
      if (arg.kind == ExprArg::Kind::kTemp) last_use[static_cast<size_t>(arg.index)] = k;
    }
  }
  FusedProgram fp;
  fp.num_inputs = static_cast<int>(spec.input_dtypes.size());
  std::vector<int> operand(n, 0);  // where temp k lives
  std::vector<int> free_bufs;
  int next_buf = 0;
  auto arg_operand = [&](const ExprArg& arg) { return arg.kind == ExprArg::Kind::kTemp ? operand[static_cast<size_t>(arg.index)] : -1 - arg.index; };
  auto new_buf = [&]() {
    if (!free_bufs.empty()) {
      const int b = free_bufs.back();
      free_bufs.pop_back();
      return b;
    }
    return next_buf++;
  };
  auto emit_unary = [&](UnaryOp u, int src, int dst) {
    FusedStep s;
    s.u = u;
    s.src[0] = src;
    s.dst = dst;
    fp.steps.push_back(s);
  };
  auto emit_binary = [&](Binary b, int x, int y, int dst) {
    FusedStep s;
    s.binary = true;
    s.b = b;
    s.src[0] = x;
    s.src[1] = y;
    s.dst = dst;
    fp.steps.push_back(s);
  };
  for (size_t k = 0; k < n; ++k) {
    if (!live[k]) continue;
    const ExprInstr& in = p.instrs[k];
    const bool is_out = static_cast<int>(k) == p.output;
    const int dst = is_out ? -1 : new_buf();  // a fresh buffer: never one of this step's operands
    std::vector<int> args;
    for (const ExprArg& arg : in.args) args.push_back(arg.kind == ExprArg::Kind::kOmitted ? 0 : arg_operand(arg));
    auto bad = [&]() { return unsupported("FusedElementwise: ", op_name(in.op), " is not supported by kiln_fused_elementwise"); };
    UnaryOp u;
    Binary b;
    auto const_arg = [&](size_t i, float* v) {
      const ExprArg& arg = in.args[i];
      return arg.kind == ExprArg::Kind::kInput && scalar_constant(spec.constant(static_cast<size_t>(arg.index)), v);
    };
    if (in.op == Op::Clip) {
      u = {Unary::kClip, -kInf, kInf};
      for (size_t i = 1; i < in.args.size(); ++i) {
        if (in.args[i].kind == ExprArg::Kind::kOmitted) continue;
        if (!const_arg(i, i == 1 ? &u.a : &u.b)) return bad();
      }
      emit_unary(u, args[0], dst);
    } else if (in.op == Op::Pow && const_arg(1, &u.a)) {
      emit_unary(pow_as_unary(u.a), args[0], dst);
    } else if ((in.op == Op::Max || in.op == Op::Min || in.op == Op::Sum || in.op == Op::Mean) && args.size() != 2) {
      // Variadic: the reference folds left to right; Mean divides the sum at the end.
      if (args.size() == 1) {
        emit_unary({Unary::kCopy, 0, 0}, args[0], dst);
      } else {
        // Partial results go to fresh buffers (never in place: the span loops assume no overlap).
        const Binary fold = in.op == Op::Max ? Binary::kMax : in.op == Op::Min ? Binary::kMin : Binary::kAdd;
        const bool mean = in.op == Op::Mean;
        int acc = args[0];
        bool acc_owned = false;
        for (size_t i = 1; i < args.size(); ++i) {
          const int t = i + 1 == args.size() && !mean ? dst : new_buf();
          emit_binary(fold, acc, args[i], t);
          if (acc_owned) free_bufs.push_back(acc);
          acc = t;
          acc_owned = true;
        }
        if (mean) {
          emit_unary({Unary::kDivConst, static_cast<float>(args.size()), 0}, acc, dst);
          free_bufs.push_back(acc);
        }
      }
    } else if (in.args.size() == 2 && binary_kind(in.op, 2, &b)) {
      emit_binary(b, args[0], args[1], dst);
    } else if (in.args.size() == 1 && unary_from_node(in.op, in.attrs, &u)) {
      emit_unary(u, args[0], dst);
    } else {
      return bad();
    }
    for (const ExprArg& arg : in.args) {
      if (arg.kind == ExprArg::Kind::kTemp && last_use[static_cast<size_t>(arg.index)] == k) {
        const int buf = operand[static_cast<size_t>(arg.index)];
        if (std::find(free_bufs.begin(), free_bufs.end(), buf) == free_bufs.end()) free_bufs.push_back(buf);
      }
    }
    operand[k] = dst;
  }
  fp.num_temps = next_buf;
  return fp;
}

// Evaluates the program for `len` (<= kBlock) output elements. args[i] points at input
// i's first element for this block, strides[i] is 1 (contiguous) or 0 (one value).
void run_fused_block(const FusedProgram& p, const float* const* args, const int64_t* strides, float* buf, float* y,
                     int64_t len) {
  const float* in_ptr[kMaxFusedElementwiseInputs];
  float* in_buf = buf + static_cast<size_t>(p.num_temps) * kBlock;
  for (int i = 0; i < p.num_inputs; ++i) {
    if (strides[i] == 1) {
      in_ptr[i] = args[i];
    } else {  // broadcast value: materialize so every step runs on contiguous arrays
      float* dst = in_buf + static_cast<size_t>(i) * kBlock;
      const float v = args[i][0];
      for (int64_t j = 0; j < len; ++j) dst[j] = v;
      in_ptr[i] = dst;
    }
  }
  auto src = [&](int o) -> const float* { return o >= 0 ? buf + static_cast<size_t>(o) * kBlock : in_ptr[-1 - o]; };
  for (const FusedStep& s : p.steps) {
    float* dst = s.dst >= 0 ? buf + static_cast<size_t>(s.dst) * kBlock : y;
    if (s.binary) {
      binary_span(s.b, src(s.src[0]), 1, src(s.src[1]), 1, dst, len);
    } else {
      unary_span(s.u, src(s.src[0]), dst, len);
    }
  }
}

class FusedKernel final : public Kernel {
 public:
  FusedKernel(FusedProgram p, int threads) : prog_(std::move(p)), threads_(threads) {}
  Status prepare(const std::vector<TensorShape>& in, const std::vector<TensorShape>& out, size_t* scratch) override {
    KILN_ENSURE(!out.empty() && in.size() >= static_cast<size_t>(prog_.num_inputs), "FusedElementwise: bad arity");
    std::vector<Dims> dims;
    for (int i = 0; i < prog_.num_inputs; ++i) dims.push_back(in[static_cast<size_t>(i)].dims);
    KILN_RETURN_IF_ERROR(plan_.init(dims, out[0].dims, kBlock));
    nt_ = threads_for(plan_.size(), threads_, 8192);
    *scratch = static_cast<size_t>(nt_) * prog_.scratch_floats() * sizeof(float);
    return Status::ok();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out, void* scratch) override {
    const float* base_ptr[kMaxFusedElementwiseInputs];
    int64_t strides[kMaxFusedElementwiseInputs];
    for (int i = 0; i < prog_.num_inputs; ++i) {
      base_ptr[i] = in[static_cast<size_t>(i)]->data<float>();
      strides[i] = plan_.inner_stride(static_cast<size_t>(i));
    }
    float* y = out[0]->data<float>();
    float* scratch_f = static_cast<float*>(scratch);
    const size_t per_thread = prog_.scratch_floats();
    const int nt = nt_;
    parallel_for_tid(plan_.items(), nt, false, [&](int64_t item, int tid) {
      float* buf = scratch_f + static_cast<size_t>(tid) * per_thread;
      int64_t offs[kMaxFusedElementwiseInputs], out_off, len;
      plan_.item_span(item, offs, &out_off, &len);
      const float* args[kMaxFusedElementwiseInputs];
      for (int i = 0; i < prog_.num_inputs; ++i) args[i] = base_ptr[i] + offs[i];
      run_fused_block(prog_, args, strides, buf, y + out_off, len);
    });
    return Status::ok();
  }

 private:
  FusedProgram prog_;
  int threads_;
  int nt_ = 1;
  BroadcastPlan plan_;
};

bool fused_supports(const LayerSpec& spec) {
  return single_f32_output(spec) && inputs_f32(spec) &&
         spec.input_dtypes.size() <= static_cast<size_t>(kMaxFusedElementwiseInputs) &&
         compile_fused_program(spec).is_ok();
}

Result<std::unique_ptr<Kernel>> fused_create(const LayerSpec& spec) {
  if (!fused_supports(spec)) return unsupported("kiln_fused_elementwise: unsupported layer");
  KILN_ASSIGN_OR_RETURN(FusedProgram p, compile_fused_program(spec));
  return std::unique_ptr<Kernel>(new FusedKernel(std::move(p), spec.threads));
}

}  // namespace

void add_elementwise_tactics(std::vector<Tactic>& out) {
  static const Op kUnary[] = {
      Op::Abs,  Op::Neg,   Op::Sign,  Op::Exp,       Op::Log,         Op::Sqrt,     Op::Reciprocal,      Op::Floor,
      Op::Ceil, Op::Round, Op::Sin,   Op::Cos,       Op::Tan,         Op::Asin,     Op::Acos,            Op::Atan,
      Op::Sinh, Op::Cosh,  Op::Asinh, Op::Acosh,     Op::Atanh,       Op::Erf,      Op::Relu,            Op::LeakyRelu,
      Op::Elu,  Op::Selu,  Op::Celu,  Op::ThresholdedRelu, Op::Sigmoid, Op::HardSigmoid, Op::HardSwish, Op::Tanh,
      Op::Gelu, Op::Softplus, Op::Softsign, Op::Mish, Op::Swish, Op::Clip};
  for (Op op : kUnary) out.push_back({"kiln_elementwise", op, unary_supports, unary_create});
  // Pow with a constant scalar exponent runs as a unary op (binary_create decides).
  static const Op kBinary[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Pow, Op::PRelu, Op::Max, Op::Min, Op::Sum, Op::Mean};
  for (Op op : kBinary) out.push_back({"kiln_elementwise", op, binary_supports, binary_create});
  out.push_back({"kiln_elementwise", Op::FusedElementwise, fused_supports, fused_create});
}

}  // namespace kiln::fast
