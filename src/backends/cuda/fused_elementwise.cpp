// FusedElementwise through NVRTC ("nvrtc_fused"); see fused_elementwise.h.
#include "backends/cuda/fused_elementwise.h"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/elementwise_ops.h"

namespace kiln::cuda {

namespace {

#define KILN_EW_OPS(...) const char kOpsSource[] = #__VA_ARGS__;
#include "backends/cuda/elementwise_ops.cuh"
#undef KILN_EW_OPS

using namespace ew;

// Mirrors KewFusedParams of the generated source (same members, same order).
struct FusedParams {
  const void* in[kMaxInputs];
  void* out;
  long long n;
  long long dims[kMaxRank];
  long long strides[kMaxInputs][kMaxRank];
  int kind[kMaxInputs];
  int rank;
};

const char kParamsSource[] = R"(
struct KewFusedParams {
  const void* in[16];
  void* out;
  long long n;
  long long dims[8];
  long long strides[16][8];
  int kind[16];
  int rank;
};
template <typename I>
__device__ __forceinline__ long long kew_off(const KewFusedParams& p, int k, I i) {
  const int kind = p.kind[k];
  if (kind == 0) return (long long)i;
  if (kind == 1) return 0;
  if (p.rank == 1) return (long long)i * p.strides[k][0];
  long long off = 0;
  I rem = i;
#pragma unroll
  for (int d = 7; d >= 0; --d) {
    if (d < p.rank) {
      const I dim = (I)p.dims[d];
      const I c = rem % dim;
      rem /= dim;
      off += (long long)c * p.strides[k][d];
    }
  }
  return off;
}
)";

static_assert(kMaxInputs == 16 && kMaxRank == 8, "KewFusedParams in kParamsSource");

// An exact float literal.
std::string flit(float v) {
  if (std::isfinite(v)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "((float)%a)", static_cast<double>(v));
    return buf;
  }
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return cat("__uint_as_float(", u, "u)");
}

const char* float_unary_fn(int code) {
  switch (code) {
    case kAbsF: return "fabsf(A)";
    case kNegF: return "(-A)";
    case kSignF: return "kew_sign_f(A)";
    case kExpF: return "expf(A)";
    case kLogF: return "logf(A)";
    case kSqrtF: return "sqrtf(A)";
    case kRecipF: return "(1.0f / A)";
    case kFloorF: return "floorf(A)";
    case kCeilF: return "ceilf(A)";
    case kRoundF: return "rintf(A)";
    case kSinF: return "sinf(A)";
    case kCosF: return "cosf(A)";
    case kTanF: return "tanf(A)";
    case kAsinF: return "asinf(A)";
    case kAcosF: return "acosf(A)";
    case kAtanF: return "atanf(A)";
    case kSinhF: return "sinhf(A)";
    case kCoshF: return "coshf(A)";
    case kAsinhF: return "asinhf(A)";
    case kAcoshF: return "acoshf(A)";
    case kAtanhF: return "atanhf(A)";
    case kErfF: return "erff(A)";
    case kReluF: return "kew_relu_f(A)";
    case kLeakyReluF: return "kew_leaky_relu_f(A, P)";
    case kEluF: return "kew_elu_f(A, P)";
    case kSeluF: return "kew_selu_f(A, P, Q)";
    case kCeluF: return "kew_celu_f(A, P)";
    case kThresholdedReluF: return "kew_thresholded_relu_f(A, P)";
    case kSigmoidF: return "kew_sigmoid_f(A)";
    case kHardSigmoidF: return "kew_hard_sigmoid_f(A, P, Q)";
    case kHardSwishF: return "kew_hard_swish_f(A)";
    case kTanhF: return "tanhf(A)";
    case kGeluF: return "kew_gelu_f(A)";
    case kGeluTanhF: return "kew_gelu_tanh_f(A)";
    case kSoftplusF: return "kew_softplus_f(A)";
    case kSoftsignF: return "kew_softsign_f(A)";
    case kMishF: return "kew_mish_f(A)";
    case kSwishF: return "kew_swish_f(A, P)";
    case kShrinkF: return "kew_shrink_f(A, P, Q)";
    default: return nullptr;
  }
}

// Replaces the placeholders A, P, Q of a template (identifiers made of one capital letter).
std::string fill(const char* tmpl, const std::string& a, const std::string& p, const std::string& q) {
  std::string out;
  for (const char* c = tmpl; *c; ++c) {
    if (*c == 'A') out += a;
    else if (*c == 'P') out += p;
    else if (*c == 'Q') out += q;
    else out += *c;
  }
  return out;
}

std::string fold(const std::vector<std::string>& args, const std::string& fn, const char* infix) {
  std::string acc = args[0];
  for (size_t k = 1; k < args.size(); ++k) {
    acc = infix ? cat("(", acc, " ", infix, " ", args[k], ")") : cat(fn, "(", acc, ", ", args[k], ")");
  }
  return acc;
}

// The C expression of one statement (before rounding to its dtype), or "" if unsupported.
std::string emit(const OpDesc& d, const std::vector<std::string>& a, const std::vector<DataType>& dts) {
  const bool fl = d.dom == Dom::kFloat;
  const std::string dt = std::to_string(static_cast<int>(d.out));
  if (is_float_unary(d.code)) return fill(float_unary_fn(d.code), a[0], flit(d.a), flit(d.b));
  switch (d.code) {
    case kIsNaN: return cat("(kew_isnan_f(", a[0], ") ? 1LL : 0LL)");
    case kIsInf: return cat("(kew_isinf_f(", a[0], ", ", d.i0, ", ", d.i1, ") ? 1LL : 0LL)");
    case kAbsI: return cat("kew_abs_i(", a[0], ")");
    case kNegI: return cat("kew_neg_i(", a[0], ")");
    case kSignI: return cat("kew_sign_i(", a[0], ")");
    case kReluI: return cat("kew_relu_i(", a[0], ")");
    case kBitNotI: return cat("(~", a[0], ")");
    case kNotB: return cat("(", a[0], " != 0 ? 0LL : 1LL)");
    case kEq: return cat("((", a[0], " == ", a[1], ") ? 1LL : 0LL)");
    case kLt: return cat("((", a[0], " < ", a[1], ") ? 1LL : 0LL)");
    case kLe: return cat("((", a[0], " <= ", a[1], ") ? 1LL : 0LL)");
    case kGt: return cat("((", a[0], " > ", a[1], ") ? 1LL : 0LL)");
    case kGe: return cat("((", a[0], " >= ", a[1], ") ? 1LL : 0LL)");
    case kAndB: return cat("((", a[0], " != 0 && ", a[1], " != 0) ? 1LL : 0LL)");
    case kOrB: return cat("((", a[0], " != 0 || ", a[1], " != 0) ? 1LL : 0LL)");
    case kXorB: return cat("(((", a[0], " != 0) != (", a[1], " != 0)) ? 1LL : 0LL)");
    case kShl: return cat("kew_shl_i(", a[0], ", ", a[1], ", ", d.i0, ")");
    case kShr: return cat("kew_shr_i(", a[0], ", ", a[1], ", ", d.i0, ")");
    case kBitAnd: return cat("(", a[0], " & ", a[1], ")");
    case kBitOr: return cat("(", a[0], " | ", a[1], ")");
    case kBitXor: return cat("(", a[0], " ^ ", a[1], ")");
    case kAdd: return fl ? cat("(", a[0], " + ", a[1], ")") : cat("kew_add_i(", a[0], ", ", a[1], ")");
    case kSub: return fl ? cat("(", a[0], " - ", a[1], ")") : cat("kew_sub_i(", a[0], ", ", a[1], ")");
    case kMul: return fl ? cat("(", a[0], " * ", a[1], ")") : cat("kew_mul_i(", a[0], ", ", a[1], ")");
    case kDiv: return fl ? cat("(", a[0], " / ", a[1], ")") : cat("kew_div_i(", a[0], ", ", a[1], ")");
    case kFmod: return fl ? cat("fmodf(", a[0], ", ", a[1], ")") : cat("kew_rem_i(", a[0], ", ", a[1], ")");
    case kPyMod: return cat(fl ? "kew_pymod_f(" : "kew_pymod_i(", a[0], ", ", a[1], ")");
    case kPRelu: return cat(fl ? "kew_prelu_f(" : "kew_prelu_i(", a[0], ", ", a[1], ")");
    case kSum: case kMean: {
      std::string s = fl ? fold(a, "", "+") : fold(a, "kew_add_i", nullptr);
      if (d.code == kSum) return s;
      if (fl) return cat("(", s, " / ", a.size(), ".0f)");
      return cat("kew_div_i(kew_norm(", s, ", ", dt, "), ", a.size(), "LL)");
    }
    case kMaxN: return fold(a, fl ? "kew_max_f" : "kew_max_i", nullptr);
    case kMinN: return fold(a, fl ? "kew_min_f" : "kew_min_i", nullptr);
    case kWhere: return cat("(", a[0], " != 0 ? ", a[1], " : ", a[2], ")");
    case kClip: {
      std::string bound[2];
      for (size_t k = 1; k < 3; ++k) {
        if (k >= a.size() || dts[k] == DataType::kUndefined) {
          bound[k - 1] = fl ? "false, 0.0f" : "false, 0LL";
          continue;
        }
        const bool src_float = domain_of(dts[k]) == Dom::kFloat;
        const std::string d_arg = src_float ? cat("(double)", a[k]) : "0.0";
        const std::string i_arg = src_float ? "0LL" : a[k];
        bound[k - 1] = cat("true, kew_conv_", fl ? "f" : "i", "(", src_float ? "true" : "false", ", ", d_arg, ", ", i_arg,
                           ", ", dt, ")");
      }
      return cat(fl ? "kew_clip_f(" : "kew_clip_i(", a[0], ", ", bound[0], ", ", bound[1], ")");
    }
    case kPow: {
      const bool exp_float = domain_of(dts[1]) == Dom::kFloat;
      if (!fl && !exp_float) return cat("kew_pow_i(", a[0], ", ", a[1], ")");
      const std::string r = cat("pow((double)", a[0], ", (double)", a[1], ")");
      return fl ? cat("(float)", r) : cat("kew_d2i(", r, ", ", dt, ")");
    }
    default: return "";
  }
}

struct Generated {
  std::string source;
  std::string error;  // why the program is not supported ("" when it is)
};

Generated generate(const ElementwiseProgram& p, const std::vector<DataType>& in_dts, DataType out_dt) {
  Generated g;
  if (static_cast<int>(in_dts.size()) < p.num_inputs) {
    g.error = cat("the program reads x", p.num_inputs - 1, " but the layer has ", in_dts.size(), " inputs");
    return g;
  }
  std::vector<bool> used(static_cast<size_t>(p.num_inputs), false);
  for (const ExprInstr& in : p.instrs) {
    for (const ExprArg& a : in.args) {
      if (a.kind == ExprArg::Kind::kInput) used[static_cast<size_t>(a.index)] = true;
    }
  }
  std::string body;
  for (int k = 0; k < p.num_inputs; ++k) {
    if (!used[static_cast<size_t>(k)]) continue;
    const DataType t = in_dts[static_cast<size_t>(k)];
    const Dom dm = domain_of(t);
    if (dm == Dom::kNone) {
      g.error = cat("input x", k, " has dtype ", dtype_name(t));
      return g;
    }
    body += cat("  const ", dm == Dom::kFloat ? "float" : "long long", " x", k, " = kew_ld", dm == Dom::kFloat ? "f" : "i",
                "(p.in[", k, "], ", static_cast<int>(t), ", kew_off<I>(p, ", k, ", i));\n");
  }
  std::vector<DataType> temp_dts;
  for (size_t s = 0; s < p.instrs.size(); ++s) {
    const ExprInstr& in = p.instrs[s];
    std::vector<DataType> dts;
    std::vector<std::string> args;
    for (const ExprArg& a : in.args) {
      if (a.kind == ExprArg::Kind::kInput) {
        dts.push_back(in_dts[static_cast<size_t>(a.index)]);
        args.push_back(cat("x", a.index));
      } else if (a.kind == ExprArg::Kind::kTemp) {
        dts.push_back(temp_dts[static_cast<size_t>(a.index)]);
        args.push_back(cat("t", a.index));
      } else {
        dts.push_back(DataType::kUndefined);
        args.push_back("");
      }
    }
    OpDesc d;
    if (!describe(in.op, in.attrs, dts, &d) || domain_of(d.out) == Dom::kNone ||
        (d.code == kWhere && d.dom == Dom::kNone)) {
      g.error = cat("statement t", s, " (", op_name(in.op), ") is not supported on these dtypes");
      return g;
    }
    const std::string e = emit(d, args, dts);
    if (e.empty()) {
      g.error = cat("statement t", s, " (", op_name(in.op), ") cannot be generated");
      return g;
    }
    const bool fl = domain_of(d.out) == Dom::kFloat;
    body += cat("  const ", fl ? "float" : "long long", " t", s, " = ", fl ? "kew_round(" : "kew_norm(", e, ", ",
                static_cast<int>(d.out), ");\n");
    temp_dts.push_back(d.out);
  }
  const DataType yt = temp_dts[static_cast<size_t>(p.output)];
  if (yt != out_dt) {
    g.error = cat("the program computes ", dtype_name(yt), " but the output is ", dtype_name(out_dt));
    return g;
  }
  body += cat("  kew_st", domain_of(yt) == Dom::kFloat ? "f" : "i", "(p.out, ", static_cast<int>(yt),
              ", (long long)i, t", p.output, ");\n");
  g.source = cat(kOpsSource, "\n", kParamsSource,
                 "template <typename I>\n__device__ __forceinline__ void kew_fused_body(const KewFusedParams& p, I i) {\n",
                 body, "}\n",
                 "extern \"C\" __global__ void kiln_fused_32(const KewFusedParams p) {\n"
                 "  const unsigned int n = (unsigned int)p.n, stride = gridDim.x * blockDim.x;\n"
                 "  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) kew_fused_body<unsigned int>(p, i);\n"
                 "}\n"
                 "extern \"C\" __global__ void kiln_fused_64(const KewFusedParams p) {\n"
                 "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
                 "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) kew_fused_body<long long>(p, i);\n"
                 "}\n");
  return g;
}

// ---- NVRTC and loaded libraries (process-wide, never unloaded) ----

std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}

std::string nvrtc_log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return "";
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(n - 1);
  return log;
}

Result<std::string> nvrtc_compile(const std::string& src, int sm) {
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, src.c_str(), "kiln_fused_elementwise.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) return internal_error("nvrtcCreateProgram: ", nvrtcGetErrorString(r));
  const std::string arch = cat("--gpu-architecture=sm_", sm);
  // No FMA contraction: a Mul then an Add must round twice, as in the unfused chain.
  const char* opts[] = {arch.c_str(), "--std=c++17", "-default-device", "--fmad=false"};
  r = nvrtcCompileProgram(prog, 4, opts);
  if (r != NVRTC_SUCCESS) {
    const std::string log = nvrtc_log(prog);
    nvrtcDestroyProgram(&prog);
    return internal_error("NVRTC compile of a FusedElementwise kernel for sm_", sm, " failed: ", nvrtcGetErrorString(r),
                          "\n", log);
  }
  size_t size = 0;
  r = nvrtcGetCUBINSize(prog, &size);
  std::string cubin;
  if (r == NVRTC_SUCCESS) {
    cubin.resize(size);
    r = nvrtcGetCUBIN(prog, cubin.data());
  }
  nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS) return internal_error("nvrtcGetCUBIN: ", nvrtcGetErrorString(r));
  return cubin;
}

struct Loaded {
  cudaLibrary_t lib = nullptr;
  cudaKernel_t k32 = nullptr;
  cudaKernel_t k64 = nullptr;
};

// The kernels of a CUBIN, loaded once per process (by CUBIN bytes).
Result<Loaded> load_cubin(const std::string& cubin) {
  static auto* loaded = new std::unordered_map<std::string, Loaded>();
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = loaded->find(cubin);
  if (it != loaded->end()) return it->second;
  Loaded l;
  KILN_CUDA_CHECK(cudaLibraryLoadData(&l.lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaError_t e = cudaLibraryGetKernel(&l.k32, l.lib, "kiln_fused_32");
  if (e == cudaSuccess) e = cudaLibraryGetKernel(&l.k64, l.lib, "kiln_fused_64");
  if (e != cudaSuccess) {
    cudaLibraryUnload(l.lib);
    return cuda_status(e, "cudaLibraryGetKernel(kiln_fused_*)");
  }
  loaded->emplace(cubin, l);
  return l;
}

// ---- the kernel ----

class FusedKernel final : public Kernel {
 public:
  FusedKernel(Loaded l, std::vector<DataType> in_dts, int num_inputs, DataType out)
      : l_(l), in_dts_(std::move(in_dts)), num_inputs_(num_inputs), out_(out) {}

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* workspace_bytes) override {
    *workspace_bytes = 0;
    if (outputs.size() != 1 || outputs[0].dtype != out_) return invalid_argument("FusedElementwise output dtype mismatch");
    if (static_cast<int>(inputs.size()) < num_inputs_) return invalid_argument("FusedElementwise: too few inputs");
    std::vector<const Dims*> dims;
    for (int k = 0; k < num_inputs_; ++k) {
      const TensorShape& s = inputs[static_cast<size_t>(k)];
      if (s.dtype != in_dts_[static_cast<size_t>(k)]) return invalid_argument("FusedElementwise input ", k, " dtype mismatch");
      dims.push_back(s.dtype == DataType::kUndefined ? nullptr : &s.dims);
    }
    Layout l;
    KILN_RETURN_IF_ERROR(make_layout(outputs[0].dims, dims, {}, &l));
    std::memset(&p_, 0, sizeof(p_));
    p_.n = l.n;
    p_.rank = l.rank;
    for (int j = 0; j < l.rank; ++j) p_.dims[j] = l.dims[j];
    for (int k = 0; k < kMaxInputs; ++k) {
      p_.kind[k] = k < num_inputs_ ? l.kind[k] : 1;
      for (int j = 0; j < l.rank; ++j) p_.strides[k][j] = k < num_inputs_ ? l.strides[k][j] : 0;
    }
    return Status::ok();
  }

  Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* workspace,
                 cudaStream_t stream) override {
    if (p_.n == 0) return Status::ok();
    FusedParams p = p_;
    for (int k = 0; k < num_inputs_; ++k) {
      const Tensor* t = inputs[static_cast<size_t>(k)];
      p.in[k] = t ? t->raw() : nullptr;
    }
    p.out = outputs[0]->raw();
    void* args[] = {&p};
    const unsigned threads = 256;
    const unsigned blocks = blocks_for(p.n, static_cast<int>(threads));
    const cudaKernel_t k = p.n <= INT32_MAX ? l_.k32 : l_.k64;
    KILN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(blocks), dim3(threads), args, 0, stream));
    return Status::ok();
  }

 private:
  Loaded l_;
  std::vector<DataType> in_dts_;
  int num_inputs_;
  DataType out_;
  FusedParams p_{};
};

// The parsed program and generated source of a layer.
struct LayerSource {
  ElementwiseProgram prog;
  std::string source;
};

Result<LayerSource> layer_source(const LayerSpec& s) {
  if (!s.attrs) return unsupported("FusedElementwise without attributes");
  const Attribute* a = s.attrs->find("expr");
  if (!a || a->type() != AttrType::kString) return unsupported("FusedElementwise needs a string attribute 'expr'");
  if (s.output_dtypes.size() != 1) return unsupported("FusedElementwise has one output");
  LayerSource ls;
  KILN_ASSIGN_OR_RETURN(ls.prog, parse_elementwise_expr(std::get<std::string>(a->value)));
  for (int k = 0; k < ls.prog.num_inputs; ++k) {
    if (static_cast<size_t>(k) >= s.input_dtypes.size() || s.input_dtypes[static_cast<size_t>(k)] == DataType::kUndefined) {
      return unsupported("FusedElementwise input ", k, " is missing");
    }
  }
  KILN_ASSIGN_OR_RETURN(ls.source, fused_elementwise_source(ls.prog, s.input_dtypes, s.output_dtypes[0]));
  return ls;
}

bool fused_supports(const LayerSpec& s) {
  if (!s.env) return false;
  return layer_source(s).is_ok();
}

Result<std::unique_ptr<Kernel>> make_kernel(const LayerSpec& s, const ElementwiseProgram& prog, const std::string& cubin) {
  KILN_ASSIGN_OR_RETURN(Loaded l, load_cubin(cubin));
  return std::unique_ptr<Kernel>(new FusedKernel(l, s.input_dtypes, prog.num_inputs, s.output_dtypes[0]));
}

// FNV-1a 64 of the generated source: identifies what a stored CUBIN was compiled from.
std::string source_hash(const std::string& src) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : src) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return cat(std::hex, h);
}

Result<std::unique_ptr<Kernel>> fused_create(const LayerSpec& s) {
  if (!s.env) return unsupported("nvrtc_fused needs the CUDA env");
  KILN_ASSIGN_OR_RETURN(LayerSource ls, layer_source(s));
  // A CUBIN stored in the plan by the builder (attach_fused_elementwise_cubin) for this
  // source and this GPU's sm: no NVRTC at load. Anything else compiles.
  if (s.attrs && s.attrs->has(kCubinAttr) && s.attrs->get_int(kCubinSmAttr, 0) == s.env->sm &&
      s.attrs->get_string(kCubinHashAttr, "") == source_hash(ls.source)) {
    auto k = make_kernel(s, ls.prog, s.attrs->get_string(kCubinAttr, ""));
    if (k.is_ok()) return k;
  }
  KILN_ASSIGN_OR_RETURN(std::string cubin, compile_cubin(ls.source, s.env->sm));
  return make_kernel(s, ls.prog, cubin);
}

}  // namespace

const char* elementwise_ops_source() { return kOpsSource; }

Result<std::string> fused_elementwise_source(const ElementwiseProgram& p, const std::vector<DataType>& input_dtypes,
                                             DataType output_dtype) {
  if (p.instrs.empty() || p.output < 0 || p.output >= static_cast<int>(p.instrs.size())) {
    return invalid_argument("malformed FusedElementwise program");
  }
  if (p.num_inputs > kMaxInputs) return unsupported("FusedElementwise with more than ", kMaxInputs, " inputs");
  Generated g = generate(p, input_dtypes, output_dtype);
  if (!g.error.empty()) return unsupported("nvrtc_fused: ", g.error);
  return std::move(g.source);
}

Result<std::string> compile_cubin(const std::string& src, int sm) {
  static auto* compiled = new std::unordered_map<std::string, std::string>();
  const std::string key = cat(sm, ":", src);
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = compiled->find(key);
    if (it != compiled->end()) return it->second;
  }
  // Compile outside the lock; two threads may compile the same source once each.
  KILN_ASSIGN_OR_RETURN(std::string cubin, nvrtc_compile(src, sm));
  std::lock_guard<std::mutex> lock(cache_mutex());
  compiled->emplace(key, cubin);
  return cubin;
}

Result<std::string> fused_elementwise_cubin(const LayerSpec& spec) {
  if (!spec.env) return unsupported("nvrtc_fused needs the CUDA env");
  KILN_ASSIGN_OR_RETURN(LayerSource ls, layer_source(spec));
  return compile_cubin(ls.source, spec.env->sm);
}

Result<std::unique_ptr<Kernel>> create_fused_elementwise_from_cubin(const LayerSpec& spec, const std::string& cubin) {
  KILN_ASSIGN_OR_RETURN(LayerSource ls, layer_source(spec));
  return make_kernel(spec, ls.prog, cubin);
}

Status attach_fused_elementwise_cubin(const LayerSpec& spec, Attributes* attrs) {
  if (!spec.env) return unsupported("nvrtc_fused needs the CUDA env");
  KILN_ASSIGN_OR_RETURN(LayerSource ls, layer_source(spec));
  KILN_ASSIGN_OR_RETURN(std::string cubin, compile_cubin(ls.source, spec.env->sm));
  attrs->set(kCubinAttr, cubin);
  attrs->set(kCubinSmAttr, static_cast<int64_t>(spec.env->sm));
  attrs->set(kCubinHashAttr, source_hash(ls.source));
  return Status::ok();
}

void add_fused_elementwise_tactics(std::vector<Tactic>& out) {
  out.push_back(Tactic{"nvrtc_fused", Op::FusedElementwise, fused_supports, fused_create});
}

}  // namespace kiln::cuda
