// oneDNN matmul tactic for MatMul (numpy semantics: 1-D operands, batch broadcasting),
// FusedGemm (activation(A [..., K] x W [K, N] + bias [N]): bias and eltwise post-ops) and
// ONNX Gemm (transA/transB as strides, alpha as the output scale, beta * C through a sum
// post-op over C broadcast into Y). A constant right-hand matrix is reordered once into the
// layout the primitive prefers; when it has no batch dims, A's batch dims fold into its rows
// so a [1, S, K] x [K, N] product is one 2-D matmul.
#include <algorithm>
#include <string>

#include "backends/cpu/fast/onednn_common.h"

namespace kiln::fast::onednn {

namespace {

using dnnl::memory;

bool f32(DataType d) { return d == DataType::kFloat32; }

// True when a constant bias of FusedGemm is [N], [1, N], ... (one row broadcast over rows).
bool row_vector(const Tensor& t) {
  for (int i = 0; i + 1 < t.rank(); ++i) {
    if (t.dim(i) != 1) return false;
  }
  return t.rank() >= 1;
}

bool matmul_supports(const LayerSpec& s) {
  if (!s.attrs || s.output_dtypes.size() != 1 || !f32(s.output_dtypes[0])) return false;
  if (!f32(s.input_dtype(0)) || !f32(s.input_dtype(1))) return false;
  const Tensor* w = s.constant(1);
  const Attributes& a = *s.attrs;
  switch (s.op) {
    case Op::MatMul:
      return s.input_dtypes.size() == 2;
    case Op::FusedGemm: {
      if (s.input_dtypes.size() != 3 || !f32(s.input_dtype(2))) return false;
      if (w && w->rank() != 2) return false;
      const Tensor* b = s.constant(2);
      if (b && (!row_vector(*b) || (w && b->dims().back() != w->dim(1)))) return false;
      const std::string act = a.get_string("activation", "None");
      if (act != "None" && act != "Relu" && act != "Gelu") return false;  // what the reference kernel runs
      std::vector<Eltwise> post;
      return activation_post_ops(a, &post);
    }
    case Op::Gemm: {
      if (s.input_dtypes.size() > 3) return false;
      const DataType c = s.input_dtype(2);
      if (c != DataType::kUndefined && !f32(c)) return false;
      if (w && w->rank() != 2) return false;
      const Tensor* ct = s.constant(2);
      return !ct || ct->rank() <= 2;
    }
    default:
      return false;
  }
}

class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const LayerSpec& s) : op_(s.op), threads_(std::max(1, s.threads)) {
    if (const Tensor* w = s.constant(1)) {
      weights_ = *w;
      const_weights_ = true;
    }
    const Attributes& a = *s.attrs;
    if (op_ == Op::FusedGemm) activation_post_ops(a, &post_);
    if (op_ == Op::Gemm) {
      alpha_ = a.get_float("alpha", 1.0f);
      beta_ = a.get_float("beta", 1.0f);
      trans_a_ = a.get_int("transA", 0) != 0;
      trans_b_ = a.get_int("transB", 0) != 0;
      // beta == 0 drops C (as ONNX Runtime does; the reference would turn an infinite C into NaN).
      has_c_ = s.input_dtype(2) != DataType::kUndefined && beta_ != 0.0f;
    }
  }

  Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                 size_t* scratch_bytes) override {
    *scratch_bytes = 0;
    ready_ = false;
    return guarded("onednn_matmul", [&] { return prepare_impl(inputs, outputs, scratch_bytes); });
  }

  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs, void* scratch) override {
    if (!ready_) return internal_error("onednn_matmul: run() before a successful prepare()");
    if (empty_) return Status::ok();
    ThreadScope threads(threads_);
    Tensor* y = outputs[0];
    KILN_RETURN_IF_ERROR(a_.bind(inputs[0]->raw()));
    if (!const_weights_) KILN_RETURN_IF_ERROR(b_.bind(inputs[1]->raw()));
    if (op_ == Op::FusedGemm) KILN_RETURN_IF_ERROR(bias_.bind(inputs[2]->raw()));
    KILN_RETURN_IF_ERROR(y_.bind(y->raw()));
    if (has_c_) broadcast_c(*input_at(inputs, 2), y->data<float>());
    return mm_.run(stream_, ScratchLayout::base(scratch), "onednn_matmul");
  }

 private:
  // Y = C broadcast to [M, N] (the sum post-op then adds beta * Y to alpha * A x B).
  void broadcast_c(const Tensor& c, float* y) const {
    const float* pc = c.data<float>();
    const int64_t M = m_, N = n_, rs = c_row_stride_, cs = c_col_stride_;
#pragma omp parallel for num_threads(threads_) if (M * N > (int64_t{1} << 16))
    for (int64_t m = 0; m < M; ++m) {
      float* row = y + m * N;
      const float* crow = pc + m * rs;
      for (int64_t n = 0; n < N; ++n) row[n] = crow[n * cs];
    }
  }

  Status prepare_impl(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                      size_t* scratch_bytes) {
    KILN_ENSURE(inputs.size() >= 2 && outputs.size() == 1, "onednn_matmul: expected two inputs and one output");
    memory::dims a_dims, b_dims, y_dims, a_strides, b_strides;
    Dims expect;
    if (op_ == Op::Gemm) {
      KILN_RETURN_IF_ERROR(gemm_shapes(inputs, &a_dims, &a_strides, &b_dims, &b_strides, &expect));
    } else {
      KILN_RETURN_IF_ERROR(matmul_shapes(inputs, &a_dims, &b_dims, &expect));
      a_strides = plain_strides(a_dims);
      b_strides = plain_strides(b_dims);
    }
    KILN_ENSURE(outputs[0].dims == expect, "onednn_matmul: output ", dims_str(outputs[0].dims), ", expected ",
                dims_str(expect));
    y_dims = a_dims;
    y_dims.back() = b_dims.back();
    for (size_t i = 0; i + 2 < y_dims.size(); ++i) y_dims[i] = std::max(a_dims[i], b_dims[i]);
    empty_ = num_elements(expect) == 0;
    if (empty_) {
      ready_ = true;
      return Status::ok();
    }
    KILN_ENSURE(a_dims.back() > 0, "onednn_matmul: empty inner dimension");

    ThreadScope threads(threads_);
    const auto f32t = memory::data_type::f32;
    const memory::desc a_md(a_dims, f32t, a_strides), b_user(b_dims, f32t, b_strides);
    const memory::desc y_md = plain_desc(y_dims);
    // A constant 2-D right-hand side is packed into the primitive's preferred layout.
    const bool pack = const_weights_ && b_dims.size() == 2;
    const memory::desc b_md = pack ? memory::desc(b_dims, f32t, memory::format_tag::any) : b_user;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
    attr.set_post_ops(make_post_ops(post_, has_c_, beta_));
    dnnl::matmul::primitive_desc pd;
    memory::desc bias_md;
    if (op_ == Op::FusedGemm) {
      bias_md = plain_desc({1, b_dims.back()});
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, y_md), attr, cpu_engine());
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, y_md), attr, cpu_engine());
    }
    if (!stream_) stream_ = dnnl::stream(cpu_engine());
    if (pack) {
      if (!b_packed_ || b_packed_.get_desc() != pd.weights_desc()) {
        memory user(b_user, cpu_engine(), const_cast<void*>(weights_.raw()));
        memory packed(pd.weights_desc(), cpu_engine());
        dnnl::reorder(user, packed).execute(stream_, user, packed);
        stream_.wait();
        b_packed_ = packed;
      }
    } else {
      b_packed_ = memory();
      b_.make(b_user);
      if (const_weights_) KILN_RETURN_IF_ERROR(b_.bind(weights_.raw()));
    }
    a_.make(a_md);
    y_.make(y_md);
    mm_.reset(dnnl::matmul(pd), pd);
    mm_.arg(DNNL_ARG_SRC, a_.mem);
    mm_.arg(DNNL_ARG_WEIGHTS, pack ? b_packed_ : b_.mem);
    if (op_ == Op::FusedGemm) {
      bias_.make(bias_md);
      mm_.arg(DNNL_ARG_BIAS, bias_.mem);
    }
    mm_.arg(DNNL_ARG_DST, y_.mem);
    ScratchLayout layout;
    layout.add(mm_.scratchpad_bytes());
    *scratch_bytes = layout.total();
    ready_ = true;
    return Status::ok();
  }

  // MatMul / FusedGemm: numpy matmul shapes as oneDNN dims of equal rank.
  Status matmul_shapes(const std::vector<TensorShape>& inputs, memory::dims* a, memory::dims* b, Dims* out) {
    Dims ad = inputs[0].dims, bd = inputs[1].dims;
    KILN_ENSURE(!ad.empty() && !bd.empty(), "onednn_matmul: operands must have rank >= 1");
    if (op_ == Op::FusedGemm) KILN_ENSURE(bd.size() == 2, "onednn_matmul: FusedGemm W must be 2-D");
    const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
    if (a_vec) ad.insert(ad.begin(), 1);
    if (b_vec) bd.push_back(1);
    const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
    KILN_ENSURE(bd[bd.size() - 2] == K, "onednn_matmul: inner dimensions differ: ", dims_str(inputs[0].dims), " x ",
                dims_str(inputs[1].dims));
    Dims ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
    const size_t r = std::max(ab.size(), bb.size());
    ab.insert(ab.begin(), r - ab.size(), 1);
    bb.insert(bb.begin(), r - bb.size(), 1);
    Dims batch(r);
    bool b_flat = true;
    for (size_t i = 0; i < r; ++i) {
      KILN_ENSURE(ab[i] == bb[i] || ab[i] == 1 || bb[i] == 1, "onednn_matmul: batch dims do not broadcast: ",
                  dims_str(inputs[0].dims), " x ", dims_str(inputs[1].dims));
      batch[i] = ab[i] == 1 ? bb[i] : ab[i];
      if (bb[i] != 1) b_flat = false;
    }
    *out = batch;
    if (!a_vec) out->push_back(M);
    if (!b_vec) out->push_back(N);
    if (op_ == Op::FusedGemm) {
      KILN_ENSURE(inputs.size() > 2 && !inputs[2].dims.empty() && inputs[2].dims.back() == N &&
                      num_elements(inputs[2].dims) == N && inputs[2].dims.size() <= out->size(),
                  "onednn_matmul: bias ", dims_str(inputs[2].dims), " is not a row of ", N);
    }
    if (b_flat) {  // B has no batch: fold A's batch into its rows (same bytes as the output)
      *a = {num_elements(ab) * M, K};
      *b = {K, N};
    } else {
      a->assign(ab.begin(), ab.end());
      a->push_back(M);
      a->push_back(K);
      b->assign(bb.begin(), bb.end());
      b->push_back(K);
      b->push_back(N);
    }
    m_ = (*a)[a->size() - 2];
    n_ = N;
    return Status::ok();
  }

  // Gemm: A and B as (possibly transposed) strided 2-D views; C's broadcast strides.
  Status gemm_shapes(const std::vector<TensorShape>& inputs, memory::dims* a, memory::dims* as, memory::dims* b,
                     memory::dims* bs, Dims* out) {
    const Dims& ad = inputs[0].dims;
    const Dims& bd = inputs[1].dims;
    KILN_ENSURE(ad.size() == 2 && bd.size() == 2, "onednn_matmul: Gemm A and B must be 2-D");
    const int64_t M = trans_a_ ? ad[1] : ad[0], K = trans_a_ ? ad[0] : ad[1];
    const int64_t Kb = trans_b_ ? bd[1] : bd[0], N = trans_b_ ? bd[0] : bd[1];
    KILN_ENSURE(K == Kb, "onednn_matmul: Gemm inner dimensions differ");
    *a = {M, K};
    *as = trans_a_ ? memory::dims{1, M} : memory::dims{K, 1};
    *b = {K, N};
    *bs = trans_b_ ? memory::dims{1, K} : memory::dims{N, 1};
    *out = {M, N};
    m_ = M;
    n_ = N;
    if (has_c_) {
      KILN_ENSURE(inputs.size() > 2 && inputs[2].dims.size() <= 2, "onednn_matmul: Gemm C must have rank <= 2");
      Dims cd = inputs[2].dims;
      cd.insert(cd.begin(), 2 - cd.size(), 1);
      KILN_ENSURE((cd[0] == 1 || cd[0] == M) && (cd[1] == 1 || cd[1] == N), "onednn_matmul: Gemm C ",
                  dims_str(inputs[2].dims), " does not broadcast to ", dims_str(*out));
      c_row_stride_ = cd[0] == 1 ? 0 : cd[1];
      c_col_stride_ = cd[1] == 1 ? 0 : 1;
    }
    return Status::ok();
  }

  Op op_;
  int threads_;
  Tensor weights_;  // the constant right-hand side (shares its storage), if any
  bool const_weights_ = false;
  std::vector<Eltwise> post_;
  float alpha_ = 1.0f, beta_ = 1.0f;
  bool trans_a_ = false, trans_b_ = false, has_c_ = false;

  bool ready_ = false, empty_ = false;
  int64_t m_ = 0, n_ = 0, c_row_stride_ = 0, c_col_stride_ = 0;
  dnnl::stream stream_;
  memory b_packed_;
  Slot a_, b_, bias_, y_;
  Exec mm_;
};

Result<std::unique_ptr<Kernel>> create_matmul(const LayerSpec& s) {
  if (!matmul_supports(s)) return unsupported("onednn_matmul: layer not supported");
  return std::unique_ptr<Kernel>(std::make_unique<MatMulKernel>(s));
}

}  // namespace

void add_matmul_tactics(std::vector<Tactic>& out) {
  // Names are unique across ops (find_tactic looks them up by name alone).
  out.push_back({"onednn_matmul", Op::MatMul, matmul_supports, create_matmul});
  out.push_back({"onednn_fusedgemm", Op::FusedGemm, matmul_supports, create_matmul});
  out.push_back({"onednn_gemm", Op::Gemm, matmul_supports, create_matmul});
}

}  // namespace kiln::fast::onednn
