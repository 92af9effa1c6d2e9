// Linear algebra reference kernels: MatMul (numpy matmul semantics), Gemm, Einsum.
// Plain loops; accumulation happens in a wide type (double for float32/float64,
// float for float16/bfloat16, wrapping uint64 for integers).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

// Refuses outputs (or iteration spaces) too large to be sensible for a reference kernel.
constexpr int64_t kMaxElements = int64_t{1} << 34;

Status checked_product(const Dims& dims, const char* what, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : dims) {
    KILN_ENSURE(d >= 0, what, " has a negative dimension: ", dims_str(dims));
    if (d != 0 && n > kMaxElements / d) return invalid_argument(what, " ", dims_str(dims), " is too large");
    n *= d;
  }
  *out = n;
  return Status::ok();
}

// Accumulator type: floats in a wider float, integers in wrapping uint64 arithmetic
// (avoids signed-overflow UB; the low bits match two's-complement wrapping).
template <typename T>
using acc_t = std::conditional_t<is_half_like_v<T>, float,
                                 std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>>;

template <typename T>
inline acc_t<T> to_acc(T v) {
  if constexpr (is_half_like_v<T>) return static_cast<float>(v);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(v);
  else return static_cast<uint64_t>(static_cast<int64_t>(v));  // sign-extends signed values
}

template <typename T>
inline T from_acc(acc_t<T> v) {
  if constexpr (is_half_like_v<T>) return T(v);
  else return static_cast<T>(v);  // integers: modular (C++20)
}

// MatMul-eligible dtypes: float types and integers (ONNX lists int32/int64/uint32/uint64;
// the narrower integers work the same way).
template <typename Fn>
bool dispatch_matmul(DataType dt, Fn&& fn) {
  return dispatch_numeric(dt, std::forward<Fn>(fn));
}

// ---- MatMul ----

Status matmul_kernel(KernelContext& ctx) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  KILN_ENSURE(a.dtype() == b.dtype(), "inputs have different dtypes: ", dtype_name(a.dtype()), " and ",
              dtype_name(b.dtype()));
  KILN_ENSURE(a.rank() >= 1 && b.rank() >= 1, "MatMul operands must have rank >= 1, got ", a.describe(), " and ",
              b.describe());
  // Promote 1-D operands: A [K] -> [1,K], B [K] -> [K,1]; the added dim is removed afterwards.
  Dims ad = a.dims(), bd = b.dims();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad.back();
  const int64_t K2 = bd[bd.size() - 2], N = bd.back();
  KILN_ENSURE(K == K2, "MatMul inner dimensions differ: ", a.describe(), " x ", b.describe());
  Dims a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  Dims batch;
  KILN_RETURN_IF_ERROR(broadcast_shapes({a_batch, b_batch}, &batch));
  Dims out_dims = batch;
  if (!a_vec) out_dims.push_back(M);
  if (!b_vec) out_dims.push_back(N);
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_product(out_dims, "MatMul output", &total));

  bool ok = dispatch_matmul(a.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, a.dtype(), out_dims);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const int64_t mk = M * K, kn = K * N, mn = M * N;
    BroadcastIndexer(batch, {a_batch, b_batch}).for_each([&](int64_t bi, const int64_t* off) {
      const T* A = pa + off[0] * mk;
      const T* B = pb + off[1] * kn;
      T* O = po + bi * mn;
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          acc_t<T> s = 0;
          for (int64_t k = 0; k < K; ++k) s += to_acc(A[m * K + k]) * to_acc(B[k * N + n]);
          O[m * N + n] = from_acc<T>(s);
        }
      }
    });
  });
  if (!ok) return unsupported_dtype(ctx.op, a.dtype());
  return Status::ok();
}

// ---- Gemm ----

Status gemm_kernel(KernelContext& ctx) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  const Tensor* c = ctx.input(2);
  KILN_ENSURE(a.dtype() == b.dtype() && (!c || c->dtype() == a.dtype()), "Gemm inputs have different dtypes");
  KILN_ENSURE(a.rank() == 2 && b.rank() == 2, "Gemm A and B must be 2-D, got ", a.describe(), " and ",
              b.describe());
  const float alpha = ctx.attr().get_float("alpha", 1.0f);
  const float beta = ctx.attr().get_float("beta", 1.0f);
  const bool ta = ctx.attr().get_int("transA", 0) != 0;
  const bool tb = ctx.attr().get_int("transB", 0) != 0;
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t Kb = tb ? b.dim(1) : b.dim(0), N = tb ? b.dim(0) : b.dim(1);
  KILN_ENSURE(K == Kb, "Gemm inner dimensions differ: A ", a.describe(), (ta ? " (transposed)" : ""), ", B ",
              b.describe(), (tb ? " (transposed)" : ""));
  const Dims out_dims{M, N};
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_product(out_dims, "Gemm output", &total));
  if (c) {
    KILN_ENSURE(c->rank() <= 2, "Gemm C must have rank <= 2, got ", c->describe());
    Dims bc;
    Status s = broadcast_shapes({out_dims, c->dims()}, &bc);
    KILN_ENSURE(s.is_ok() && bc == out_dims, "Gemm C ", c->describe(), " cannot be broadcast to ",
                dims_str(out_dims));
  }
  bool ok = dispatch_matmul(a.dtype(), [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, a.dtype(), out_dims);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    // Element offsets of A(m,k) and B(k,n) with the transposes applied.
    const int64_t as_m = ta ? 1 : K, as_k = ta ? M : 1;
    const int64_t bs_k = tb ? 1 : N, bs_n = tb ? K : 1;
    Tensor cb;
    const T* pc = nullptr;
    if (c) {
      // Materialize C broadcast to (M, N).
      cb = Tensor(a.dtype(), out_dims);
      T* q = cb.data<T>();
      const T* src = c->data<T>();
      BroadcastIndexer(out_dims, {c->dims()}).for_each([&](int64_t i, const int64_t* off) { q[i] = src[off[0]]; });
      pc = q;
    }
    const bool int_exact = !is_float_v<T> && alpha == 1.0f && beta == 1.0f;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        acc_t<T> s = 0;
        for (int64_t k = 0; k < K; ++k) s += to_acc(pa[m * as_m + k * as_k]) * to_acc(pb[k * bs_k + n * bs_n]);
        if constexpr (is_float_v<T>) {
          using A = acc_t<T>;
          A r = static_cast<A>(alpha) * s;
          if (pc) r += static_cast<A>(beta) * to_acc(pc[m * N + n]);
          po[m * N + n] = from_acc<T>(r);
        } else if (int_exact) {
          if (pc) s += to_acc(pc[m * N + n]);
          po[m * N + n] = from_acc<T>(s);
        } else {
          // Integers with non-unit alpha/beta: scale in double, then convert (Cast semantics).
          double r = static_cast<double>(alpha) * static_cast<double>(static_cast<T>(s));
          if (pc) r += static_cast<double>(beta) * static_cast<double>(pc[m * N + n]);
          po[m * N + n] = convert_element<T>(r);
        }
      }
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, a.dtype());
  return Status::ok();
}

// ---- Einsum ----

bool is_label(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

// One term of the equation: labels in order, with -1 marking the ellipsis position.
struct Term {
  std::vector<int> items;  // label char codes, or -1 for "..."
  bool has_ellipsis = false;
};

Status parse_term(const std::string& s, Term* t) {
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '.') {
      KILN_ENSURE(s.compare(i, 3, "...") == 0, "Einsum: malformed ellipsis in term '", s, "'");
      KILN_ENSURE(!t->has_ellipsis, "Einsum: more than one ellipsis in term '", s, "'");
      t->has_ellipsis = true;
      t->items.push_back(-1);
      i += 3;
    } else {
      KILN_ENSURE(is_label(s[i]), "Einsum: invalid character '", s[i], "' in term '", s, "'");
      t->items.push_back(static_cast<unsigned char>(s[i]));
      ++i;
    }
  }
  return Status::ok();
}

Status einsum_kernel(KernelContext& ctx) {
  std::string eq_raw = ctx.attr().get_string("equation", "");
  std::string eq;
  for (char ch : eq_raw) {
    if (ch != ' ') eq += ch;
  }
  KILN_ENSURE(!eq.empty(), "Einsum: missing equation");
  const size_t n_in = ctx.num_inputs();
  for (size_t i = 0; i < n_in; ++i) KILN_ENSURE(ctx.input(i) != nullptr, "Einsum: input ", i, " is missing");
  const DataType dt = ctx.input(0)->dtype();
  for (size_t i = 1; i < n_in; ++i) {
    KILN_ENSURE(ctx.input(i)->dtype() == dt, "Einsum inputs have different dtypes: ", dtype_name(dt), " and ",
                dtype_name(ctx.input(i)->dtype()));
  }

  // Split into input terms and (optional) output term.
  const size_t arrow = eq.find("->");
  const bool explicit_out = arrow != std::string::npos;
  std::string lhs = explicit_out ? eq.substr(0, arrow) : eq;
  std::string rhs = explicit_out ? eq.substr(arrow + 2) : "";
  KILN_ENSURE(rhs.find("->") == std::string::npos, "Einsum: more than one '->' in '", eq_raw, "'");
  std::vector<Term> terms;
  {
    size_t start = 0;
    while (true) {
      size_t comma = lhs.find(',', start);
      Term t;
      KILN_RETURN_IF_ERROR(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), &t));
      terms.push_back(std::move(t));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  KILN_ENSURE(terms.size() == n_in, "Einsum: equation '", eq_raw, "' has ", terms.size(), " input terms but the node has ",
              n_in, " inputs");

  // Ellipsis dims per operand, and their broadcast shape.
  std::vector<Dims> ell_shapes(n_in);
  bool any_ellipsis = false;
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& x = *ctx.input(i);
    const int64_t nlab = static_cast<int64_t>(terms[i].items.size()) - (terms[i].has_ellipsis ? 1 : 0);
    if (terms[i].has_ellipsis) {
      any_ellipsis = true;
      KILN_ENSURE(x.rank() >= nlab, "Einsum: operand ", i, " ", x.describe(), " has fewer dims than term labels");
      size_t pos = static_cast<size_t>(std::find(terms[i].items.begin(), terms[i].items.end(), -1) - terms[i].items.begin());
      ell_shapes[i] = Dims(x.dims().begin() + static_cast<int64_t>(pos),
                           x.dims().begin() + static_cast<int64_t>(pos) + (x.rank() - nlab));
    } else {
      KILN_ENSURE(x.rank() == nlab, "Einsum: operand ", i, " ", x.describe(), " has rank ", x.rank(), " but term has ",
                  nlab, " labels");
    }
  }
  Dims ell;
  KILN_RETURN_IF_ERROR(broadcast_shapes(ell_shapes, &ell));
  const int n_ell = static_cast<int>(ell.size());

  // Label ids: ellipsis dims get ids 0..n_ell-1, letters get ids from n_ell on.
  std::map<int, int> letter_id;  // char -> id
  std::map<int, int> letter_count;
  for (const Term& t : terms) {
    for (int c : t.items) {
      if (c < 0) continue;
      ++letter_count[c];
      if (!letter_id.count(c)) letter_id[c] = 0;  // assigned below in sorted order
    }
  }
  int next_id = n_ell;
  for (auto& [c, id] : letter_id) id = next_id++;
  const int n_labels = next_id;

  // Output term.
  std::vector<int> out_ids;
  if (explicit_out) {
    Term ot;
    KILN_RETURN_IF_ERROR(parse_term(rhs, &ot));
    std::vector<bool> seen(static_cast<size_t>(n_labels), false);
    for (int c : ot.items) {
      if (c < 0) {
        for (int e = 0; e < n_ell; ++e) out_ids.push_back(e);
        continue;
      }
      KILN_ENSURE(letter_id.count(c), "Einsum: output label '", static_cast<char>(c), "' does not appear in the inputs");
      int id = letter_id[c];
      KILN_ENSURE(!seen[static_cast<size_t>(id)], "Einsum: output label '", static_cast<char>(c), "' is repeated");
      seen[static_cast<size_t>(id)] = true;
      out_ids.push_back(id);
    }
    KILN_ENSURE(ot.has_ellipsis || n_ell == 0, "Einsum: inputs have broadcast ('...') dims but the output has no '...'");
  } else {
    for (int e = 0; e < n_ell; ++e) out_ids.push_back(e);
    for (auto& [c, id] : letter_id) {  // std::map: ascending char code (uppercase before lowercase)
      if (letter_count[c] == 1) out_ids.push_back(id);
    }
  }
  (void)any_ellipsis;

  // Label sizes; a size-1 dim broadcasts against other operands (numpy), but repeated
  // labels within one operand must match exactly.
  Dims label_size(static_cast<size_t>(n_labels), 1);
  for (int e = 0; e < n_ell; ++e) label_size[static_cast<size_t>(e)] = ell[static_cast<size_t>(e)];
  // Per operand: the label id of each dim.
  std::vector<std::vector<int>> dim_ids(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& x = *ctx.input(i);
    const int64_t ne = static_cast<int64_t>(ell_shapes[i].size());
    for (int c : terms[i].items) {
      if (c < 0) {
        for (int64_t e = 0; e < ne; ++e) dim_ids[i].push_back(static_cast<int>(n_ell - ne + e));
      } else {
        dim_ids[i].push_back(letter_id[c]);
      }
    }
    std::map<int, int64_t> own;  // label -> size within this operand
    for (size_t d = 0; d < dim_ids[i].size(); ++d) {
      const int id = dim_ids[i][d];
      const int64_t sz = x.dims()[d];
      auto it = own.find(id);
      if (it != own.end()) {
        KILN_ENSURE(it->second == sz, "Einsum: operand ", i, " ", x.describe(), " repeats a label over dims of different sizes");
        continue;
      }
      own[id] = sz;
      if (id < n_ell) continue;  // already broadcast
      int64_t& ls = label_size[static_cast<size_t>(id)];
      if (sz == 1) continue;
      KILN_ENSURE(ls == 1 || ls == sz, "Einsum: label sizes do not match across operands (", ls, " vs ", sz, ")");
      ls = sz;
    }
  }
  // A label that is 1 everywhere but 0 somewhere: size 0 wins (sz==1 skip above never hides a 0).
  Dims out_dims;
  for (int id : out_ids) out_dims.push_back(label_size[static_cast<size_t>(id)]);
  int64_t out_total = 0;
  KILN_RETURN_IF_ERROR(checked_product(out_dims, "Einsum output", &out_total));

  // Iteration order: output labels, then summed labels.
  std::vector<int> order = out_ids;
  {
    std::vector<bool> in_out(static_cast<size_t>(n_labels), false);
    for (int id : out_ids) in_out[static_cast<size_t>(id)] = true;
    for (int id = 0; id < n_labels; ++id) {
      if (!in_out[static_cast<size_t>(id)]) order.push_back(id);
    }
  }
  Dims sum_dims;
  for (size_t j = out_ids.size(); j < order.size(); ++j) sum_dims.push_back(label_size[static_cast<size_t>(order[j])]);
  int64_t sum_total = 0;
  KILN_RETURN_IF_ERROR(checked_product(sum_dims, "Einsum summation space", &sum_total));
  KILN_ENSURE(out_total == 0 || sum_total <= kMaxElements / out_total, "Einsum: iteration space is too large");

  // strides[i][j]: element stride of operand i along iteration label order[j]. Repeated
  // labels add their strides (a diagonal); a size-1 dim against a larger label has stride 0.
  std::vector<Dims> strides(n_in, Dims(order.size(), 0));
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& x = *ctx.input(i);
    Dims cs = contiguous_strides(x.dims());
    for (size_t d = 0; d < dim_ids[i].size(); ++d) {
      const int id = dim_ids[i][d];
      if (x.dims()[d] == 1 && label_size[static_cast<size_t>(id)] != 1) continue;
      size_t j = static_cast<size_t>(std::find(order.begin(), order.end(), id) - order.begin());
      strides[i][j] += cs[d];
    }
  }
  const size_t n_out_lab = out_ids.size();
  const size_t n_iter = order.size();

  bool ok = dispatch_numeric(dt, [&]<typename T>() {
    Tensor& out = ctx.alloc_output(0, dt, out_dims);
    T* po = out.data<T>();
    if (out_total == 0) return;
    std::vector<const T*> ptr(n_in);
    for (size_t i = 0; i < n_in; ++i) ptr[i] = ctx.input(i)->template data<T>();
    std::vector<int64_t> idx(n_iter, 0);
    std::vector<int64_t> off(n_in, 0);
    // Advances the multi-index over labels [lo, hi), updating operand offsets; false on wrap.
    auto advance = [&](size_t lo, size_t hi) {
      for (size_t j = hi; j-- > lo;) {
        ++idx[j];
        for (size_t i = 0; i < n_in; ++i) off[i] += strides[i][j];
        if (idx[j] < label_size[static_cast<size_t>(order[j])]) return true;
        for (size_t i = 0; i < n_in; ++i) off[i] -= strides[i][j] * idx[j];
        idx[j] = 0;
      }
      return false;
    };
    for (int64_t o = 0; o < out_total; ++o) {
      acc_t<T> s = 0;
      if (sum_total > 0) {
        do {
          acc_t<T> p = 1;
          for (size_t i = 0; i < n_in; ++i) p *= to_acc(ptr[i][off[i]]);
          s += p;
        } while (advance(n_out_lab, n_iter));
      }
      po[o] = from_acc<T>(s);
      advance(0, n_out_lab);
    }
  });
  if (!ok) return unsupported_dtype(ctx.op, dt);
  return Status::ok();
}

}  // namespace

void register_linalg_kernels(KernelRegistry& r) {
  r.add(Op::MatMul, matmul_kernel);
  r.add(Op::Gemm, gemm_kernel);
  r.add(Op::Einsum, einsum_kernel);
}

}  // namespace kiln
