// Host side of the CUDA elementwise ops, shared by the generic kernels (elementwise.cu)
// and the NVRTC FusedElementwise kernels (fused_elementwise.cpp): which (op, dtypes)
// the GPU computes exactly like the reference, the op's code and parameters, and the
// broadcast layout (coalesced output dims and per-input strides) of a layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/attributes.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/op.h"

namespace kiln::cuda::ew {

constexpr int kMaxRank = 8;
constexpr int kMaxInputs = 16;

// The value domain an op computes in: float (float32/float16/bfloat16) or 64-bit integer
// (the integer dtypes but uint64, and bool as 0/1).
enum class Dom { kNone, kFloat, kInt };

inline Dom domain_of(DataType t) {
  switch (t) {
    case DataType::kFloat32: case DataType::kFloat16: case DataType::kBFloat16: return Dom::kFloat;
    case DataType::kInt8: case DataType::kInt16: case DataType::kInt32: case DataType::kInt64:
    case DataType::kUInt8: case DataType::kUInt16: case DataType::kUInt32: case DataType::kBool: return Dom::kInt;
    default: return Dom::kNone;
  }
}
inline bool is_int_dt(DataType t) { return domain_of(t) == Dom::kInt && t != DataType::kBool; }
inline bool is_unsigned_dt(DataType t) {
  return t == DataType::kUInt8 || t == DataType::kUInt16 || t == DataType::kUInt32;
}
inline int bits_of(DataType t) { return static_cast<int>(dtype_size(t) * 8); }

// Op codes of the device switch in elementwise.cu and of the NVRTC emitter.
enum Code : int {
  // float unary (a, b: parameters)
  kAbsF, kNegF, kSignF, kExpF, kLogF, kSqrtF, kRecipF, kFloorF, kCeilF, kRoundF, kSinF, kCosF, kTanF, kAsinF,
  kAcosF, kAtanF, kSinhF, kCoshF, kAsinhF, kAcoshF, kAtanhF, kErfF, kReluF, kLeakyReluF, kEluF, kSeluF, kCeluF,
  kThresholdedReluF, kSigmoidF, kHardSigmoidF, kHardSwishF, kTanhF, kGeluF, kGeluTanhF, kSoftplusF, kSoftsignF,
  kMishF, kSwishF, kShrinkF,
  kLastUnaryF = kShrinkF,
  // float -> bool predicates (i0, i1: IsInf's detect_negative, detect_positive)
  kIsNaN, kIsInf,
  // integer unary
  kAbsI, kNegI, kSignI, kReluI, kBitNotI, kNotB,
  // binary, in the op's domain (dom): arithmetic keeps the dtype, comparisons give bool
  kAdd, kSub, kMul, kDiv, kFmod, kPyMod, kMax2, kMin2, kPRelu,
  kEq, kLt, kLe, kGt, kGe,
  kAndB, kOrB, kXorB, kShl, kShr, kBitAnd, kBitOr, kBitXor,
  // variadic folds over all inputs
  kSum, kMean, kMaxN, kMinN,
  // special layouts
  kWhere,  // bool condition, then two inputs of one dtype (any dtype; a raw copy)
  kClip,   // x, optional min and max of any numeric dtype (one element each)
  kPow,    // base (float or int), exponent of any numeric dtype
  kCast,   // any supported dtype to any
};

inline bool is_float_unary(int c) { return c <= kLastUnaryF; }
inline bool is_binary(int c) { return c >= kAdd && c <= kBitXor; }
inline bool is_compare(int c) { return c >= kEq && c <= kGe; }
inline bool is_variadic(int c) { return c >= kSum && c <= kMinN; }

struct OpDesc {
  Code code = kAbsF;
  Dom dom = Dom::kNone;  // domain of the computation (of input 0; of X for Where)
  float a = 0, b = 0;     // float parameters
  int i0 = 0, i1 = 0;     // integer parameters (IsInf flags, BitShift width)
  DataType out = DataType::kUndefined;
};

// Dtypes the ops can read: the float and integer domains (Cast and Where also move float64).
inline bool loadable(DataType t) { return domain_of(t) != Dom::kNone || t == DataType::kFloat64; }

// Whether the GPU computes `op` on inputs of dtypes `in` (kUndefined: omitted) exactly as the
// reference does; fills *d (code, domain, parameters, output dtype). Cast is handled by
// describe_cast; FusedElementwise by the NVRTC emitter.
inline bool describe(Op op, const Attributes& at, const std::vector<DataType>& in, OpDesc* d) {
  OpDesc r;
  const size_t n = in.size();
  if (n == 0 || in[0] == DataType::kUndefined) return false;
  const DataType t0 = in[0];
  const Dom dom = domain_of(t0);
  r.dom = dom;
  r.out = t0;
  auto all_same = [&]() {
    for (DataType t : in) {
      if (t != t0) return false;
    }
    return true;
  };
  auto set = [&](Code c) {
    r.code = c;
    *d = r;
    return true;
  };
  const bool f = dom == Dom::kFloat;
  const bool i = dom == Dom::kInt && t0 != DataType::kBool;
  const bool b = t0 == DataType::kBool;
  // unary
  if (op_info(op).max_inputs == 1) {
    if (n != 1) return false;
    switch (op) {
      case Op::Abs: return f ? set(kAbsF) : i ? set(kAbsI) : false;
      case Op::Neg: return f ? set(kNegF) : (i && !is_unsigned_dt(t0)) ? set(kNegI) : false;
      case Op::Sign: return f ? set(kSignF) : i ? set(kSignI) : false;
      case Op::Relu: return f ? set(kReluF) : i ? set(kReluI) : false;
      case Op::BitwiseNot: return i ? set(kBitNotI) : false;
      case Op::Not: return b ? set(kNotB) : false;
      case Op::IsNaN: r.out = DataType::kBool; return f ? set(kIsNaN) : false;
      case Op::IsInf:
        r.out = DataType::kBool;
        r.i0 = at.get_int("detect_negative", 1) != 0;
        r.i1 = at.get_int("detect_positive", 1) != 0;
        return f ? set(kIsInf) : false;
      default: break;
    }
    if (!f) return false;
    switch (op) {
      case Op::Exp: return set(kExpF);
      case Op::Log: return set(kLogF);
      case Op::Sqrt: return set(kSqrtF);
      case Op::Reciprocal: return set(kRecipF);
      case Op::Floor: return set(kFloorF);
      case Op::Ceil: return set(kCeilF);
      case Op::Round: return set(kRoundF);
      case Op::Sin: return set(kSinF);
      case Op::Cos: return set(kCosF);
      case Op::Tan: return set(kTanF);
      case Op::Asin: return set(kAsinF);
      case Op::Acos: return set(kAcosF);
      case Op::Atan: return set(kAtanF);
      case Op::Sinh: return set(kSinhF);
      case Op::Cosh: return set(kCoshF);
      case Op::Asinh: return set(kAsinhF);
      case Op::Acosh: return set(kAcoshF);
      case Op::Atanh: return set(kAtanhF);
      case Op::Erf: return set(kErfF);
      case Op::LeakyRelu: r.a = at.get_float("alpha", 0.01f); return set(kLeakyReluF);
      case Op::Elu: r.a = at.get_float("alpha", 1.0f); return set(kEluF);
      case Op::Selu:
        r.a = at.get_float("alpha", 1.67326319217681884765625f);
        r.b = at.get_float("gamma", 1.05070102214813232421875f);
        return set(kSeluF);
      case Op::Celu:
        r.a = at.get_float("alpha", 1.0f);
        if (r.a == 0.0f) return false;  // the reference rejects it
        return set(kCeluF);
      case Op::ThresholdedRelu: r.a = at.get_float("alpha", 1.0f); return set(kThresholdedReluF);
      case Op::Sigmoid: return set(kSigmoidF);
      case Op::HardSigmoid:
        r.a = at.get_float("alpha", 0.2f);
        r.b = at.get_float("beta", 0.5f);
        return set(kHardSigmoidF);
      case Op::HardSwish: return set(kHardSwishF);
      case Op::Tanh: return set(kTanhF);
      case Op::Gelu: {
        const std::string approx = at.get_string("approximate", "none");
        if (approx == "none") return set(kGeluF);
        if (approx == "tanh") return set(kGeluTanhF);
        return false;
      }
      case Op::Softplus: return set(kSoftplusF);
      case Op::Softsign: return set(kSoftsignF);
      case Op::Mish: return set(kMishF);
      case Op::Swish: r.a = at.get_float("alpha", 1.0f); return set(kSwishF);
      case Op::Shrink:
        r.a = at.get_float("bias", 0.0f);
        r.b = at.get_float("lambd", 0.5f);
        return set(kShrinkF);
      default: return false;
    }
  }
  switch (op) {
    case Op::Where: {
      if (n != 3 || t0 != DataType::kBool || in[1] != in[2] || !loadable(in[1])) return false;
      r.dom = domain_of(in[1]);
      r.out = in[1];
      return set(kWhere);
    }
    case Op::Clip: {
      if (!(f || i)) return false;
      for (size_t k = 1; k < n; ++k) {
        if (in[k] != DataType::kUndefined && (!loadable(in[k]) || in[k] == DataType::kBool)) return false;
      }
      return set(kClip);
    }
    case Op::Pow: {
      if (n != 2 || !(f || i) || !loadable(in[1]) || in[1] == DataType::kBool) return false;
      return set(kPow);
    }
    case Op::Sum: case Op::Mean: case Op::Max: case Op::Min: {
      if (!(f || i) || !all_same() || n > static_cast<size_t>(kMaxInputs)) return false;
      return set(op == Op::Sum ? kSum : op == Op::Mean ? kMean : op == Op::Max ? kMaxN : kMinN);
    }
    default: break;
  }
  if (n != 2 || in[1] != t0 || dom == Dom::kNone) return false;
  switch (op) {
    case Op::Add: return (f || i) ? set(kAdd) : false;
    case Op::Sub: return (f || i) ? set(kSub) : false;
    case Op::Mul: return (f || i) ? set(kMul) : false;
    case Op::Div: return (f || i) ? set(kDiv) : false;
    case Op::Mod: {
      const int64_t fm = at.get_int("fmod", 0);
      if (!(f || i) || (fm != 0 && fm != 1)) return false;
      return set(fm == 1 ? kFmod : kPyMod);
    }
    case Op::PRelu: return (f || i) ? set(kPRelu) : false;
    case Op::Equal: r.out = DataType::kBool; return set(kEq);
    case Op::Less: r.out = DataType::kBool; return (f || i) ? set(kLt) : false;
    case Op::LessOrEqual: r.out = DataType::kBool; return (f || i) ? set(kLe) : false;
    case Op::Greater: r.out = DataType::kBool; return (f || i) ? set(kGt) : false;
    case Op::GreaterOrEqual: r.out = DataType::kBool; return (f || i) ? set(kGe) : false;
    case Op::And: return b ? set(kAndB) : false;
    case Op::Or: return b ? set(kOrB) : false;
    case Op::Xor: return b ? set(kXorB) : false;
    case Op::BitShift: {
      const std::string dir = at.get_string("direction", "");
      if (!i || (dir != "LEFT" && dir != "RIGHT")) return false;
      r.i0 = bits_of(t0);
      return set(dir == "LEFT" ? kShl : kShr);
    }
    case Op::BitwiseAnd: return i ? set(kBitAnd) : false;
    case Op::BitwiseOr: return i ? set(kBitOr) : false;
    case Op::BitwiseXor: return i ? set(kBitXor) : false;
    default: return false;
  }
}

// Cast (with 'to', or CastLike's second input) between the dtypes the kernels load.
inline bool describe_cast(const Attributes& at, const std::vector<DataType>& in, DataType* to) {
  if (in.empty() || !loadable(in[0])) return false;
  DataType t;
  if (in.size() > 1 && in[1] != DataType::kUndefined) {
    t = in[1];
  } else {
    if (!at.has("to")) return false;
    t = static_cast<DataType>(at.get_int("to", 0));
  }
  if (!loadable(t)) return false;
  *to = t;
  return true;
}

// The broadcast layout of a layer: output dims with adjacent dims merged where every
// operand allows it, and each input's element strides over them (0: broadcast).
struct Layout {
  int64_t n = 0;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxInputs][kMaxRank] = {};
  // Per input: 0 contiguous with the output (offset = index), 1 one element (offset 0),
  // 2 strided. Omitted inputs are 1.
  int kind[kMaxInputs] = {};
};

// `ins[k]` nullptr: omitted; `scalar[k]`: a one-element input read at offset 0 whatever its
// rank (Clip's bounds). Fails when an input does not broadcast to `out` or rank > 8.
inline Status make_layout(const Dims& out, const std::vector<const Dims*>& ins, const std::vector<bool>& scalar,
                          Layout* l) {
  *l = Layout();
  const int nin = static_cast<int>(ins.size());
  if (nin > kMaxInputs) return unsupported("more than ", kMaxInputs, " inputs");
  const int r = static_cast<int>(out.size());
  l->n = num_elements(out);
  std::vector<std::vector<int64_t>> st(static_cast<size_t>(nin), std::vector<int64_t>(static_cast<size_t>(r), 0));
  for (int k = 0; k < nin; ++k) {
    const Dims* d = ins[static_cast<size_t>(k)];
    const bool sc = static_cast<size_t>(k) < scalar.size() && scalar[static_cast<size_t>(k)];
    if (!d) continue;
    if (sc) {
      if (num_elements(*d) != 1) return invalid_argument("input ", k, " must have one element, has shape ", dims_str(*d));
      continue;
    }
    const int ri = static_cast<int>(d->size());
    if (ri > r) return invalid_argument("input ", k, " of rank ", ri, " does not broadcast to rank ", r);
    int64_t s = 1;
    for (int j = ri - 1; j >= 0; --j) {
      const int64_t dim = (*d)[static_cast<size_t>(j)];
      const int od = r - ri + j;
      if (dim == out[static_cast<size_t>(od)]) {
        st[static_cast<size_t>(k)][static_cast<size_t>(od)] = dim == 1 ? 0 : s;
      } else if (dim != 1) {
        return invalid_argument("input ", k, " shape ", dims_str(*d), " does not broadcast to ", dims_str(out));
      }
      s *= dim;
    }
  }
  // Coalesce: drop size-1 dims; merge dim j into the next inner kept one when every input
  // has stride[j] == stride[inner] * dims[inner].
  std::vector<int64_t> cd;
  std::vector<std::vector<int64_t>> cs(static_cast<size_t>(nin));
  for (int j = r - 1; j >= 0; --j) {  // innermost first
    const int64_t dim = out[static_cast<size_t>(j)];
    if (dim == 1) continue;
    if (!cd.empty()) {
      bool merge = true;
      for (int k = 0; k < nin && merge; ++k) {
        merge = st[static_cast<size_t>(k)][static_cast<size_t>(j)] == cs[static_cast<size_t>(k)].back() * cd.back();
      }
      if (merge) {
        cd.back() *= dim;
        continue;
      }
    }
    cd.push_back(dim);
    for (int k = 0; k < nin; ++k) cs[static_cast<size_t>(k)].push_back(st[static_cast<size_t>(k)][static_cast<size_t>(j)]);
  }
  if (cd.size() > static_cast<size_t>(kMaxRank)) return unsupported("rank ", cd.size(), " after merging dims exceeds ", kMaxRank);
  l->rank = static_cast<int>(cd.size());
  for (int j = 0; j < l->rank; ++j) {  // back to outermost first
    const size_t src = cd.size() - 1 - static_cast<size_t>(j);
    l->dims[j] = cd[src];
    for (int k = 0; k < nin; ++k) l->strides[k][j] = cs[static_cast<size_t>(k)][src];
  }
  for (int k = 0; k < nin; ++k) {
    bool zero = true, contiguous = true;
    int64_t s = 1;
    for (int j = l->rank - 1; j >= 0; --j) {
      zero = zero && l->strides[k][j] == 0;
      contiguous = contiguous && l->strides[k][j] == s;
      s *= l->dims[j];
    }
    l->kind[k] = zero ? 1 : contiguous ? 0 : 2;
  }
  return Status::ok();
}

}  // namespace kiln::cuda::ew
