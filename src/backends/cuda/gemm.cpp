// cuBLASLt tactic "cublaslt_gemm" for MatMul (numpy semantics: 1-D operands, batch
// broadcasting), Gemm (transA/transB, alpha, beta, C broadcast to [M, N]) and FusedGemm
// (activation(A [..., K] x W [K, N] + bias [N]), activation None|Relu|Gelu).
//
// Row-major Y[M, N] = A[M, K] x B[K, N] runs as the column-major product Y^T = B^T A^T:
// cuBLASLt's "A" is our B (an N x K column-major matrix, or K x N with op T when transB),
// its "B" is our A, and D is Y^T (N x M, ld N). A bias over N is then a bias over D's rows,
// which is what the cuBLASLt bias epilogues add.
//
// Batches: batch dims are broadcast, those of size 1 dropped, and the longest suffix of
// them over which each operand is either contiguous or broadcast becomes one strided
// batched call (or, when B is broadcast and A contiguous there, extra rows of A: a
// [b, s, K] x [K, N] product is one [b*s, K] x [K, N] GEMM). Remaining leading batch dims
// become several cublasLtMatmul calls with precomputed pointer offsets.
//
// Epilogues: Gemm's C is the bias epilogue when it is a row of N and beta == 1; otherwise
// it is copied (broadcast) into Y and used with beta as C == D. FusedGemm uses BIAS,
// RELU_BIAS or GELU_BIAS (tanh GELU); the erf GELU runs BIAS plus an own in-place kernel.
// When cuBLASLt offers no algorithm for an epilogue, DEFAULT plus the own bias/activation
// kernel is used; when it offers none for a strided batch, one call per matrix.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_kernel.h"
#include "backends/cuda/gemm_kernels.h"

namespace kiln::cuda {

namespace {

using gemm::Act;

constexpr size_t kMaxWorkspace = size_t{32} << 20;  // per the heuristic query
constexpr int kHeuristicCount = 8;
constexpr uint32_t kArenaAlignment = 256;  // device pointers from the arena

Status lt_status(cublasStatus_t s, const char* what) {
  return internal_error("cublaslt_gemm: ", what, ": ", cublasLtGetStatusName(s), " (", cublasLtGetStatusString(s),
                        ")");
}

#define KILN_LT_CHECK(call)                                                   \
  do {                                                                        \
    cublasStatus_t kiln_lt_st_ = (call);                                      \
    if (kiln_lt_st_ != CUBLAS_STATUS_SUCCESS) return lt_status(kiln_lt_st_, #call); \
  } while (0)

cudaDataType_t lt_type(DataType d) {
  switch (d) {
    case DataType::kFloat16: return CUDA_R_16F;
    case DataType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// A row vector: [N], [1, N], [1, 1, N], ...
bool row_vector(const Dims& d) {
  if (d.empty()) return false;
  for (size_t i = 0; i + 1 < d.size(); ++i) {
    if (d[i] != 1) return false;
  }
  return true;
}

// FusedGemm's activation; false for one this tactic does not run.
bool fused_activation(const Attributes& a, Act* act) {
  const std::string s = a.get_string("activation", "None");
  if (s == "None") {
    *act = Act::kNone;
  } else if (s == "Relu") {
    *act = Act::kRelu;
  } else if (s == "Gelu") {
    const std::string approx = a.get_string("approximate", "none");
    if (approx == "none") {
      *act = Act::kGeluErf;
    } else if (approx == "tanh") {
      *act = Act::kGeluTanh;
    } else {
      return false;
    }
  } else {
    return false;
  }
  return true;
}

bool gemm_supports(const LayerSpec& s) {
  if (!s.env || !s.env->cublaslt) return false;
  if (s.output_dtypes.size() != 1) return false;
  const DataType dt = s.output_dtypes[0];
  if (!is_cuda_float(dt) || s.input_dtype(0) != dt || s.input_dtype(1) != dt) return false;
  const Attributes& a = s.attributes();
  const Tensor* w = s.constant(1);
  switch (s.op) {
    case Op::MatMul:
      return s.input_dtypes.size() == 2;
    case Op::Gemm: {
      if (s.input_dtypes.size() < 2 || s.input_dtypes.size() > 3) return false;
      const DataType c = s.input_dtype(2);
      if (c != DataType::kUndefined && c != dt) return false;
      if (const Tensor* x = s.constant(0); x && x->rank() != 2) return false;
      if (w && w->rank() != 2) return false;
      const Tensor* ct = s.constant(2);
      return !ct || ct->rank() <= 2;
    }
    case Op::FusedGemm: {
      if (s.input_dtypes.size() != 3 || s.input_dtype(2) != dt) return false;
      Act act;
      if (!fused_activation(a, &act)) return false;
      if (w && w->rank() != 2) return false;
      const Tensor* b = s.constant(2);
      if (b && (!row_vector(b->dims()) || (w && b->dims().back() != w->dim(1)))) return false;
      return true;
    }
    default:
      return false;
  }
}

// RAII for the cuBLASLt descriptors.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using PrefPtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter>;

// Row-major Y[rows, N] = op(A)[rows, K] x op(B)[K, N], `batch` times (strided), once per
// entry of `calls` (element offsets of A, B and Y).
struct Geometry {
  int64_t rows = 0, N = 0, K = 0;
  bool ta = false, tb = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_y = 0;
  std::vector<std::array<int64_t, 3>> calls;
};

// The largest power of two (<= the arena's alignment) dividing every byte offset.
uint32_t alignment_of(const std::vector<int64_t>& byte_offsets) {
  uint32_t a = kArenaAlignment;
  for (int64_t o : byte_offsets) {
    while (a > 1 && (o % a) != 0) a >>= 1;
  }
  return a;
}

// One way of running the layer's epilogue: a cuBLASLt epilogue plus an optional own pass.
struct Epilogue {
  cublasLtEpilogue_t lt = CUBLASLT_EPILOGUE_DEFAULT;
  bool own_bias = false;  // the own kernel adds the bias
  Act own_act = Act::kNone;
};

class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const LayerSpec& s)
      : op_(s.op), dtype_(s.output_dtypes[0]), handle_(static_cast<cublasLtHandle_t>(s.env->cublaslt)),
        tf32_(s.env->tf32) {
    const Attributes& a = s.attributes();
    if (op_ == Op::Gemm) {
      alpha_ = a.get_float("alpha", 1.0f);
      gemm_beta_ = a.get_float("beta", 1.0f);
      trans_a_ = a.get_int("transA", 0) != 0;
      trans_b_ = a.get_int("transB", 0) != 0;
      // beta == 0 drops C (as the CPU fast backend does).
      has_c_ = s.input_dtype(2) != DataType::kUndefined && gemm_beta_ != 0.0f;
    }
    if (op_ == Op::FusedGemm) fused_activation(a, &act_);
  }

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* workspace_bytes) override {
    *workspace_bytes = 0;
    ready_ = false;
    desc_.reset();
    la_.reset();
    lb_.reset();
    lc_.reset();
    KILN_ENSURE(inputs.size() >= 2 && outputs.size() == 1, "cublaslt_gemm: expected two or three inputs, one output");
    Dims expect;
    Geometry g;
    Geometry flat;  // no strided batch (the fallback)
    if (op_ == Op::Gemm) {
      KILN_RETURN_IF_ERROR(gemm_geometry(inputs, &expect, &g));
      flat = g;
    } else {
      if (op_ == Op::FusedGemm) {
        KILN_ENSURE(inputs.size() == 3 && inputs[1].dims.size() == 2, "cublaslt_gemm: FusedGemm W must be 2-D, got ",
                    dims_str(inputs[1].dims));
      }
      KILN_RETURN_IF_ERROR(matmul_geometry(inputs[0].dims, inputs[1].dims, true, &expect, &g));
      KILN_RETURN_IF_ERROR(matmul_geometry(inputs[0].dims, inputs[1].dims, false, &expect, &flat));
      if (op_ == Op::FusedGemm) {
        const Dims& bd = inputs[2].dims;
        KILN_ENSURE(row_vector(bd) && bd.back() == g.N && bd.size() <= std::max<size_t>(expect.size(), 1),
                    "cublaslt_gemm: FusedGemm bias ", dims_str(bd), " is not a row of ", g.N);
      }
    }
    KILN_ENSURE(outputs[0].dims == expect, "cublaslt_gemm: output ", dims_str(outputs[0].dims), ", expected ",
                dims_str(expect));
    const int64_t total = num_elements(expect);
    empty_ = total == 0;
    n_ = g.N;
    out_rows_ = g.N > 0 ? total / g.N : 0;
    k_zero_ = g.K == 0;
    if (empty_ || k_zero_) {
      ready_ = true;
      return Status::ok();
    }

    // Epilogue candidates, best first.
    std::vector<Epilogue> cands;
    if (op_ == Op::FusedGemm) {
      switch (act_) {
        case Act::kNone: cands.push_back({CUBLASLT_EPILOGUE_BIAS, false, Act::kNone}); break;
        case Act::kRelu: cands.push_back({CUBLASLT_EPILOGUE_RELU_BIAS, false, Act::kNone}); break;
        case Act::kGeluTanh: cands.push_back({CUBLASLT_EPILOGUE_GELU_BIAS, false, Act::kNone}); break;
        case Act::kGeluErf: cands.push_back({CUBLASLT_EPILOGUE_BIAS, false, Act::kGeluErf}); break;
      }
      cands.push_back({CUBLASLT_EPILOGUE_DEFAULT, true, act_});
    } else if (c_mode_ == CMode::kBias) {
      cands.push_back({CUBLASLT_EPILOGUE_BIAS, false, Act::kNone});
      cands.push_back({CUBLASLT_EPILOGUE_DEFAULT, true, Act::kNone});
    } else {
      cands.push_back({CUBLASLT_EPILOGUE_DEFAULT, false, Act::kNone});
    }
    std::vector<const Geometry*> geoms{&g};
    if (g.batch > 1) geoms.push_back(&flat);
    Status last = internal_error("cublaslt_gemm: no candidate");
    for (const Geometry* geo : geoms) {
      for (const Epilogue& e : cands) {
        last = build(*geo, e);
        if (last.is_ok()) {
          geo_ = *geo;
          epi_ = e;
          *workspace_bytes = ws_bytes_;
          ready_ = true;
          return Status::ok();
        }
        if (last.code() != StatusCode::kUnsupported) return last;
      }
    }
    return last;
  }

  Status enqueue(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* workspace,
                 cudaStream_t stream) override {
    if (!ready_) return internal_error("cublaslt_gemm: enqueue() before a successful prepare()");
    if (empty_) return Status::ok();
    Tensor* y = outputs[0];
    char* py = static_cast<char*>(y->raw());
    const size_t es = dtype_size(dtype_);
    const Tensor* c = inputs.size() > 2 ? inputs[2] : nullptr;  // Gemm C or FusedGemm bias
    const void* bias = nullptr;
    if (op_ == Op::FusedGemm || c_mode_ == CMode::kBias) bias = c->raw();

    if (k_zero_) {  // empty inner dimension: Y = beta * C, act(bias) or zeros
      if (c_mode_ != CMode::kNone) {
        return gemm::broadcast_copy(dtype_, c->raw(), c_rs_, c_cs_, py, out_rows_, n_, gemm_beta_, stream);
      }
      KILN_CUDA_CHECK(cudaMemsetAsync(py, 0, static_cast<size_t>(out_rows_ * n_) * es, stream));
      if (op_ == Op::FusedGemm) return gemm::bias_activation(dtype_, py, bias, out_rows_, n_, act_, stream);
      return Status::ok();
    }

    if (c_mode_ == CMode::kCopy) {
      KILN_RETURN_IF_ERROR(gemm::broadcast_copy(dtype_, c->raw(), c_rs_, c_cs_, py, out_rows_, n_, 1.0f, stream));
    }
    if (epi_.lt != CUBLASLT_EPILOGUE_DEFAULT) {
      KILN_ENSURE(reinterpret_cast<uintptr_t>(bias) % 16 == 0, "cublaslt_gemm: bias pointer is not 16-byte aligned");
      KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    const char* pa = static_cast<const char*>(inputs[0]->raw());
    const char* pb = static_cast<const char*>(inputs[1]->raw());
    const float beta = c_mode_ == CMode::kCopy ? gemm_beta_ : 0.0f;
    for (const auto& call : geo_.calls) {
      const char* a = pa + call[0] * static_cast<int64_t>(es);
      const char* b = pb + call[1] * static_cast<int64_t>(es);
      char* d = py + call[2] * static_cast<int64_t>(es);
      KILN_ENSURE(reinterpret_cast<uintptr_t>(a) % align_a_ == 0 && reinterpret_cast<uintptr_t>(b) % align_b_ == 0 &&
                      reinterpret_cast<uintptr_t>(d) % align_y_ == 0,
                  "cublaslt_gemm: operand pointers are less aligned than prepare() assumed");
      // cuBLASLt's A is our B, its B our A (see the top of the file); C == D.
      KILN_LT_CHECK(cublasLtMatmul(handle_, desc_.get(), &alpha_, b, la_.get(), a, lb_.get(), &beta, d, lc_.get(), d,
                                   lc_.get(), &algo_, ws_bytes_ ? workspace : nullptr, ws_bytes_, stream));
    }
    if (epi_.own_bias || epi_.own_act != Act::kNone) {
      KILN_RETURN_IF_ERROR(
          gemm::bias_activation(dtype_, py, epi_.own_bias ? bias : nullptr, out_rows_, n_, epi_.own_act, stream));
    }
    return Status::ok();
  }

 private:
  enum class CMode { kNone, kBias, kCopy };  // Gemm's C: absent, bias epilogue, copied into Y

  // Gemm: 2-D A and B with transposes; C's broadcast strides and how it is applied.
  Status gemm_geometry(const std::vector<TensorShape>& inputs, Dims* out, Geometry* g) {
    const Dims& ad = inputs[0].dims;
    const Dims& bd = inputs[1].dims;
    KILN_ENSURE(ad.size() == 2 && bd.size() == 2, "cublaslt_gemm: Gemm A and B must be 2-D, got ", dims_str(ad), " and ",
                dims_str(bd));
    const int64_t M = trans_a_ ? ad[1] : ad[0], K = trans_a_ ? ad[0] : ad[1];
    const int64_t Kb = trans_b_ ? bd[1] : bd[0], N = trans_b_ ? bd[0] : bd[1];
    KILN_ENSURE(K == Kb, "cublaslt_gemm: Gemm inner dimensions differ: ", dims_str(ad), " x ", dims_str(bd));
    *out = {M, N};
    g->rows = M;
    g->N = N;
    g->K = K;
    g->ta = trans_a_;
    g->tb = trans_b_;
    g->calls = {{0, 0, 0}};
    c_mode_ = CMode::kNone;
    if (has_c_) {
      KILN_ENSURE(inputs.size() > 2 && inputs[2].dims.size() <= 2, "cublaslt_gemm: Gemm C must have rank <= 2");
      const Dims& c0 = inputs[2].dims;  // as [rows, cols] with leading 1s
      const Dims cd{c0.size() == 2 ? c0[0] : 1, c0.empty() ? 1 : c0.back()};
      KILN_ENSURE((cd[0] == 1 || cd[0] == M) && (cd[1] == 1 || cd[1] == N), "cublaslt_gemm: Gemm C ",
                  dims_str(inputs[2].dims), " does not broadcast to ", dims_str(*out));
      c_rs_ = cd[0] == 1 ? 0 : cd[1];
      c_cs_ = cd[1] == 1 ? 0 : 1;
      const bool row = cd[0] == 1 && cd[1] == N;
      c_mode_ = row && gemm_beta_ == 1.0f ? CMode::kBias : CMode::kCopy;
    }
    return Status::ok();
  }

  // MatMul / FusedGemm (numpy matmul shapes). allow_batch: may use a strided batch.
  static Status matmul_geometry(const Dims& a_in, const Dims& b_in, bool allow_batch, Dims* out, Geometry* g) {
    KILN_ENSURE(!a_in.empty() && !b_in.empty(), "cublaslt_gemm: MatMul operands must have rank >= 1, got ",
                dims_str(a_in), " and ", dims_str(b_in));
    Dims ad = a_in, bd = b_in;
    const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
    if (a_vec) ad.insert(ad.begin(), 1);
    if (b_vec) bd.push_back(1);
    const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
    KILN_ENSURE(bd[bd.size() - 2] == K, "cublaslt_gemm: MatMul inner dimensions differ: ", dims_str(a_in), " x ",
                dims_str(b_in));
    Dims ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
    const size_t r = std::max(ab.size(), bb.size());
    ab.insert(ab.begin(), r - ab.size(), 1);
    bb.insert(bb.begin(), r - bb.size(), 1);
    Dims batch(r);
    for (size_t i = 0; i < r; ++i) {
      KILN_ENSURE(ab[i] == bb[i] || ab[i] == 1 || bb[i] == 1, "cublaslt_gemm: MatMul batch dims do not broadcast: ",
                  dims_str(a_in), " x ", dims_str(b_in));
      batch[i] = ab[i] == 1 ? bb[i] : ab[i];
    }
    *out = batch;
    if (!a_vec) out->push_back(M);
    if (!b_vec) out->push_back(N);
    *g = Geometry{};
    g->rows = M;
    g->N = N;
    g->K = K;
    if (num_elements(*out) == 0) return Status::ok();  // nothing to compute

    // Batch dims of size > 1 with each operand's element stride there (0: broadcast).
    Dims od;
    std::vector<int64_t> as, bs;
    int64_t sa = M * K, sb = K * N;
    std::vector<int64_t> a_str(r), b_str(r);
    for (size_t i = r; i-- > 0;) {
      a_str[i] = ab[i] == 1 ? 0 : sa;
      b_str[i] = bb[i] == 1 ? 0 : sb;
      sa *= ab[i];
      sb *= bb[i];
    }
    for (size_t i = 0; i < r; ++i) {
      if (batch[i] == 1) continue;
      od.push_back(batch[i]);
      as.push_back(a_str[i]);
      bs.push_back(b_str[i]);
    }
    // The longest suffix where A is either contiguous everywhere or broadcast everywhere,
    // and the same for B: one strided batch (or extra rows of A).
    const size_t n = od.size();
    size_t s = n;
    while (s > 0 && ((as[s - 1] != 0) == (as[n - 1] != 0)) && ((bs[s - 1] != 0) == (bs[n - 1] != 0))) --s;
    int64_t inner = 1;
    for (size_t i = s; i < n; ++i) inner *= od[i];
    const bool a_full = n > 0 && as[n - 1] != 0, b_full = n > 0 && bs[n - 1] != 0;
    if (n > s && a_full && !b_full) {
      g->rows = inner * M;  // B is shared over the suffix: fold it into A's rows
    } else if (allow_batch && n > s) {
      g->batch = inner;
      g->stride_a = a_full ? M * K : 0;
      g->stride_b = b_full ? K * N : 0;
      g->stride_y = M * N;
    } else {
      s = n;
      inner = 1;
    }
    KILN_ENSURE(g->batch <= INT32_MAX, "cublaslt_gemm: batch of ", g->batch, " is too large");
    // One call per index of the leading dims od[0, s).
    int64_t outer = 1;
    for (size_t i = 0; i < s; ++i) outer *= od[i];
    g->calls.reserve(static_cast<size_t>(outer));
    std::vector<int64_t> idx(s, 0);
    for (int64_t o = 0; o < outer; ++o) {
      int64_t oa = 0, ob = 0;
      for (size_t i = 0; i < s; ++i) {
        oa += idx[i] * as[i];
        ob += idx[i] * bs[i];
      }
      g->calls.push_back({oa, ob, o * inner * M * N});
      for (size_t i = s; i-- > 0;) {
        if (++idx[i] < od[i]) break;
        idx[i] = 0;
      }
    }
    return Status::ok();
  }

  // Descriptors, layouts and an algorithm for one geometry and epilogue; kUnsupported
  // when cuBLASLt has no algorithm for them.
  Status build(const Geometry& g, const Epilogue& e) {
    const size_t es = dtype_size(dtype_);
    const cudaDataType_t t = lt_type(dtype_);
    const cublasComputeType_t compute =
        dtype_ == DataType::kFloat32 && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t d = nullptr;
    KILN_LT_CHECK(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
    DescPtr desc(d);
    const cublasOperation_t op_a = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A = our B
    const cublasOperation_t op_b = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B = our A
    KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e.lt, sizeof(e.lt)));
    if (e.lt != CUBLASLT_EPILOGUE_DEFAULT) {
      const int32_t bt = static_cast<int32_t>(t);
      KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    const uint64_t M = static_cast<uint64_t>(g.rows), N = static_cast<uint64_t>(g.N), K = static_cast<uint64_t>(g.K);
    auto make_layout = [&](uint64_t rows, uint64_t cols, int64_t ld, int64_t stride, LayoutPtr* out) -> Status {
      cublasLtMatrixLayout_t l = nullptr;
      KILN_LT_CHECK(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
      out->reset(l);
      if (g.batch > 1) {
        const int32_t count = static_cast<int32_t>(g.batch);
        KILN_LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        KILN_LT_CHECK(
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      }
      return Status::ok();
    };
    LayoutPtr la, lb, lc;
    // Our B, row-major [K, N] (or [N, K] when transposed): column-major N x K (K x N).
    if (g.tb) {
      KILN_RETURN_IF_ERROR(make_layout(K, N, static_cast<int64_t>(K), g.stride_b, &la));
    } else {
      KILN_RETURN_IF_ERROR(make_layout(N, K, static_cast<int64_t>(N), g.stride_b, &la));
    }
    // Our A, row-major [M, K] (or [K, M]): column-major K x M (M x K).
    if (g.ta) {
      KILN_RETURN_IF_ERROR(make_layout(M, K, static_cast<int64_t>(M), g.stride_a, &lb));
    } else {
      KILN_RETURN_IF_ERROR(make_layout(K, M, static_cast<int64_t>(K), g.stride_a, &lb));
    }
    KILN_RETURN_IF_ERROR(make_layout(N, M, static_cast<int64_t>(N), g.stride_y, &lc));

    // Alignment the pointers of every call will have (arena pointers are 256-byte aligned).
    std::vector<int64_t> oa{g.stride_a * static_cast<int64_t>(es)}, ob{g.stride_b * static_cast<int64_t>(es)},
        oy{g.stride_y * static_cast<int64_t>(es)};
    for (const auto& c : g.calls) {
      oa.push_back(c[0] * static_cast<int64_t>(es));
      ob.push_back(c[1] * static_cast<int64_t>(es));
      oy.push_back(c[2] * static_cast<int64_t>(es));
    }
    const uint32_t align_a = alignment_of(oa), align_b = alignment_of(ob), align_y = alignment_of(oy);

    cublasLtMatmulPreference_t p = nullptr;
    KILN_LT_CHECK(cublasLtMatmulPreferenceCreate(&p));
    PrefPtr pref(p);
    const uint64_t max_ws = kMaxWorkspace;
    KILN_LT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    // cuBLASLt's A, B = our B, A; C and D = Y.
    KILN_LT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof(align_b)));
    KILN_LT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof(align_a)));
    KILN_LT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_y, sizeof(align_y)));
    KILN_LT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_y, sizeof(align_y)));

    cublasLtMatmulHeuristicResult_t results[kHeuristicCount] = {};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, d, la.get(), lb.get(), lc.get(), lc.get(), p,
                                                             kHeuristicCount, results, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return unsupported("cublaslt_gemm: no cuBLASLt algorithm");
    KILN_LT_CHECK(st);
    for (int i = 0; i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > kMaxWorkspace) continue;
      algo_ = results[i].algo;
      ws_bytes_ = results[i].workspaceSize;
      desc_ = std::move(desc);
      la_ = std::move(la);
      lb_ = std::move(lb);
      lc_ = std::move(lc);
      align_a_ = align_a;
      align_b_ = align_b;
      align_y_ = align_y;
      return Status::ok();
    }
    return unsupported("cublaslt_gemm: no cuBLASLt algorithm for ", g.rows, "x", g.N, "x", g.K, " batch ", g.batch);
  }

  Op op_;
  DataType dtype_;
  cublasLtHandle_t handle_;
  bool tf32_;
  float alpha_ = 1.0f, gemm_beta_ = 1.0f;
  bool trans_a_ = false, trans_b_ = false, has_c_ = false;
  Act act_ = Act::kNone;

  // Set by prepare().
  bool ready_ = false, empty_ = false, k_zero_ = false;
  CMode c_mode_ = CMode::kNone;
  int64_t c_rs_ = 0, c_cs_ = 0, n_ = 0, out_rows_ = 0;
  Geometry geo_;
  Epilogue epi_;
  DescPtr desc_;
  LayoutPtr la_, lb_, lc_;
  cublasLtMatmulAlgo_t algo_{};
  size_t ws_bytes_ = 0;
  uint32_t align_a_ = 1, align_b_ = 1, align_y_ = 1;
};

Result<std::unique_ptr<Kernel>> create_gemm(const LayerSpec& s) {
  if (!gemm_supports(s)) return unsupported("cublaslt_gemm: layer not supported");
  return std::unique_ptr<Kernel>(std::make_unique<GemmKernel>(s));
}

}  // namespace

void add_gemm_tactics(std::vector<Tactic>& out) {
  // One name for the three ops (look it up with the op: find_tactic(name) alone returns the MatMul entry).
  out.push_back({"cublaslt_gemm", Op::MatMul, gemm_supports, create_gemm});
  out.push_back({"cublaslt_gemm", Op::Gemm, gemm_supports, create_gemm});
  out.push_back({"cublaslt_gemm", Op::FusedGemm, gemm_supports, create_gemm});
}

}  // namespace kiln::cuda
