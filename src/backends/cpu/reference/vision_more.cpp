// More vision reference kernels: Col2Im, DeformConv, MaxUnpool, and TfIdfVectorizer.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/nn_common.h"
#include "backends/cpu/reference/util.h"
#include "backends/cpu/reference/vision_common.h"

namespace kiln {

namespace {

// Reads a 1-D int64 shape-like input of `n` values (n < 0: any length), each >= min_value.
Status read_int_vector(const Tensor& t, const char* what, int64_t n, int64_t min_value, std::vector<int64_t>* out) {
  KILN_ENSURE(t.dtype() == DataType::kInt64 || t.dtype() == DataType::kInt32, what, " must be int64");
  KILN_ENSURE(t.rank() == 1, what, " must be 1-D, got ", dims_str(t.dims()));
  KILN_ENSURE(n < 0 || t.size() == n, what, " must have ", n, " values, got ", t.size());
  *out = t.to_int_vector();
  for (int64_t v : *out) {
    KILN_ENSURE(v >= min_value && v <= (int64_t{1} << 32), what, " has invalid value ", v, " (must be >= ", min_value,
                ")");
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// Col2Im
// ---------------------------------------------------------------------------------------

Status col2im_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() == 3, "input must be 3-D [N, C * prod(block_shape), L], got ", dims_str(x.dims()));
  std::vector<int64_t> image, block;
  KILN_RETURN_IF_ERROR(read_int_vector(*ctx.input(1), "image_shape", -1, 0, &image));
  const size_t r = image.size();
  KILN_ENSURE(r >= 1, "image_shape must not be empty");
  KILN_RETURN_IF_ERROR(read_int_vector(*ctx.input(2), "block_shape", static_cast<int64_t>(r), 1, &block));
  const Attributes& a = ctx.attr();
  Dims dil, strides, pads;
  KILN_RETURN_IF_ERROR(spatial_ints(a, "dilations", r, 1, 1, &dil));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", r, 1, 1, &strides));
  KILN_RETURN_IF_ERROR(spatial_pads(a, r, &pads));
  int64_t k = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(block, &k));
  KILN_ENSURE(x.dim(1) % k == 0, "input dimension 1 (", x.dim(1), ") is not divisible by prod(block_shape) = ", k);
  Dims nblocks(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = image[d] + pads[d] + pads[d + r] - (dil[d] * (block[d] - 1) + 1);
    KILN_ENSURE(span >= 0, "block_shape ", dims_str(block), " does not fit image_shape ", dims_str(image),
                " with the given pads and dilations");
    nblocks[d] = span / strides[d] + 1;
  }
  int64_t nl = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(nblocks, &nl));
  KILN_ENSURE(x.dim(2) == nl, "input dimension 2 (", x.dim(2), ") must equal the number of blocks ", nl, " ",
              dims_str(nblocks));
  const int64_t n = x.dim(0), c = x.dim(1) / k;
  Dims out_dims = {n, c};
  out_dims.insert(out_dims.end(), image.begin(), image.end());
  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  const int64_t img_sp = num_elements(image);
  const Dims img_strides = contiguous_strides(image);
  return dispatch_numeric_status(ctx.op, x.dtype(), [&]<typename T>() -> Status {
    using C = compute_t<T>;
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    if (total == 0) return Status::ok();
    std::vector<C> acc(static_cast<size_t>(total), C(0));
    const T* px = x.data<T>();
    std::vector<int64_t> kidx(r, 0), bidx(r, 0);
    for (int64_t kk = 0; kk < k; ++kk, next_index(kidx, block)) {
      std::fill(bidx.begin(), bidx.end(), 0);
      for (int64_t l = 0; l < nl; ++l, next_index(bidx, nblocks)) {
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d < r && inside; ++d) {
          const int64_t pos = bidx[d] * strides[d] - pads[d] + kidx[d] * dil[d];
          inside = pos >= 0 && pos < image[d];
          off += pos * img_strides[d];
        }
        if (!inside) continue;
        for (int64_t b = 0; b < n; ++b) {
          for (int64_t ch = 0; ch < c; ++ch) {
            acc[static_cast<size_t>((b * c + ch) * img_sp + off)] += to_compute(px[(b * c * k + ch * k + kk) * nl + l]);
          }
        }
      }
    }
    T* py = y.data<T>();
    for (int64_t i = 0; i < total; ++i) py[i] = from_compute<T>(acc[static_cast<size_t>(i)]);
    return Status::ok();
  });
}

// ---------------------------------------------------------------------------------------
// DeformConv
// ---------------------------------------------------------------------------------------

// Multilinear interpolation of `plane` (extents `in`) at real coordinates p; zero outside.
template <typename T>
double sample_zero_padded(const T* plane, const Dims& in, const Dims& strides, const std::vector<double>& p) {
  const size_t r = in.size();
  int64_t base[8];
  double frac[8];
  for (size_t d = 0; d < r; ++d) {
    const double len = static_cast<double>(in[d]);
    if (!(p[d] > -1.0 && p[d] < len)) return 0.0;  // every tap outside (also NaN)
    const double f = std::floor(p[d]);
    base[d] = static_cast<int64_t>(f);
    frac[d] = p[d] - f;
  }
  double acc = 0.0;
  for (unsigned corner = 0; corner < (1u << r); ++corner) {
    double w = 1.0;
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < r; ++d) {
      const bool hi = (corner >> d) & 1u;
      const int64_t i = base[d] + (hi ? 1 : 0);
      if (i < 0 || i >= in[d]) {
        inside = false;
        break;
      }
      w *= hi ? frac[d] : 1.0 - frac[d];
      off += i * strides[d];
    }
    if (inside && w != 0.0) acc += w * static_cast<double>(to_compute(plane[off]));
  }
  return acc;
}

Status deform_conv_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor& offset = *ctx.input(2);
  const Tensor* bias = ctx.input(3);
  const Tensor* mask = ctx.input(4);
  const Attributes& a = ctx.attr();
  KILN_ENSURE(x.rank() >= 3 && x.rank() <= 8, "X must have rank 3 to 8 [N, C, spatial...], got ", dims_str(x.dims()));
  const size_t r = static_cast<size_t>(x.rank() - 2);
  KILN_ENSURE(w.rank() == x.rank(), "W must have rank ", x.rank(), ", got ", dims_str(w.dims()));
  KILN_ENSURE(offset.rank() == x.rank(), "offset must have rank ", x.rank(), ", got ", dims_str(offset.dims()));
  for (const Tensor* t : {&w, &offset, bias, mask}) {
    KILN_ENSURE(!t || t->dtype() == x.dtype(), "all inputs must have the dtype of X");
  }
  const int64_t group = a.get_int("group", 1), og = a.get_int("offset_group", 1);
  KILN_ENSURE(group >= 1 && og >= 1, "attributes 'group' and 'offset_group' must be >= 1");
  const Dims in(x.dims().begin() + 2, x.dims().end());
  const Dims kernel(w.dims().begin() + 2, w.dims().end());
  if (a.has("kernel_shape")) {
    KILN_ENSURE(a.get_ints("kernel_shape") == std::vector<int64_t>(kernel.begin(), kernel.end()),
                "attribute 'kernel_shape' disagrees with W ", dims_str(w.dims()));
  }
  Dims dil, strides, pads;
  KILN_RETURN_IF_ERROR(spatial_ints(a, "dilations", r, 1, 1, &dil));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", r, 1, 1, &strides));
  KILN_RETURN_IF_ERROR(spatial_pads(a, r, &pads));
  const int64_t n = x.dim(0), c = x.dim(1), oc = w.dim(0);
  KILN_ENSURE(c % group == 0 && w.dim(1) * group == c, "W ", dims_str(w.dims()), " does not match ", c,
              " input channels in ", group, " groups");
  KILN_ENSURE(oc % group == 0, "output channels ", oc, " are not divisible by group ", group);
  KILN_ENSURE(c % og == 0, "input channels ", c, " are not divisible by offset_group ", og);
  int64_t kn = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(kernel, &kn));
  Dims out(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = in[d] + pads[d] + pads[d + r] - ((kernel[d] - 1) * dil[d] + 1);
    KILN_ENSURE(span >= 0, "kernel ", dims_str(kernel), " does not fit X ", dims_str(x.dims()));
    out[d] = span / strides[d] + 1;
  }
  Dims want_off = {n, og * kn * static_cast<int64_t>(r)};
  want_off.insert(want_off.end(), out.begin(), out.end());
  KILN_ENSURE(offset.dims() == want_off, "offset must have shape ", dims_str(want_off), ", got ",
              dims_str(offset.dims()));
  if (mask) {
    Dims want_mask = {n, og * kn};
    want_mask.insert(want_mask.end(), out.begin(), out.end());
    KILN_ENSURE(mask->dims() == want_mask, "mask must have shape ", dims_str(want_mask), ", got ",
                dims_str(mask->dims()));
  }
  KILN_ENSURE(!bias || (bias->rank() == 1 && bias->dim(0) == oc), "B must have shape [", oc, "]");
  Dims out_dims = {n, oc};
  out_dims.insert(out_dims.end(), out.begin(), out.end());
  int64_t total = 0, out_sp = 0, col_size = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  KILN_RETURN_IF_ERROR(checked_num_elements(out, &out_sp));
  KILN_RETURN_IF_ERROR(checked_num_elements({c, kn, out_sp}, &col_size));
  KILN_ENSURE(col_size <= (int64_t{1} << 28), "DeformConv column buffer of ", col_size, " elements is too large");
  const int64_t in_sp = num_elements(in);
  const Dims in_strides = contiguous_strides(in);
  const int64_t cg = c / group, ocg = oc / group, c_per_og = c / og;

  return dispatch_float_status(ctx.op, x.dtype(), [&]<typename T>() -> Status {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    if (total == 0) return Status::ok();
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* po = offset.data<T>();
    const T* pm = mask ? mask->data<T>() : nullptr;
    T* py = y.data<T>();
    std::vector<double> col(static_cast<size_t>(col_size));
    std::vector<double> p(r);
    std::vector<int64_t> kidx(r), opos(r);
    for (int64_t b = 0; b < n; ++b) {
      // Column buffer: col[(ic * kn + k) * out_sp + o] = mask * X[b, ic] sampled at the offset tap.
      for (int64_t ic = 0; ic < c; ++ic) {
        const int64_t g = ic / c_per_og;
        const T* plane = px + (b * c + ic) * in_sp;
        std::fill(kidx.begin(), kidx.end(), 0);
        for (int64_t k = 0; k < kn; ++k, next_index(kidx, kernel)) {
          std::fill(opos.begin(), opos.end(), 0);
          for (int64_t o = 0; o < out_sp; ++o, next_index(opos, out)) {
            for (size_t d = 0; d < r; ++d) {
              const int64_t ch = ((b * og + g) * kn + k) * static_cast<int64_t>(r) + static_cast<int64_t>(d);
              p[d] = static_cast<double>(opos[d] * strides[d] - pads[d] + kidx[d] * dil[d]) +
                     static_cast<double>(to_compute(po[ch * out_sp + o]));
            }
            double v = sample_zero_padded(plane, in, in_strides, p);
            if (pm) v *= static_cast<double>(to_compute(pm[((b * og + g) * kn + k) * out_sp + o]));
            col[static_cast<size_t>((ic * kn + k) * out_sp + o)] = v;
          }
        }
      }
      for (int64_t f = 0; f < oc; ++f) {
        const int64_t g = f / ocg;
        const double bv = bias ? static_cast<double>(to_compute(bias->data<T>()[f])) : 0.0;
        for (int64_t o = 0; o < out_sp; ++o) {
          double acc = bv;
          for (int64_t icg = 0; icg < cg; ++icg) {
            const int64_t ic = g * cg + icg;
            for (int64_t k = 0; k < kn; ++k) {
              acc += static_cast<double>(to_compute(pw[(f * cg + icg) * kn + k])) *
                     col[static_cast<size_t>((ic * kn + k) * out_sp + o)];
            }
          }
          py[(b * oc + f) * out_sp + o] = from_compute<T>(static_cast<compute_t<T>>(acc));
        }
      }
    }
    return Status::ok();
  });
}

// ---------------------------------------------------------------------------------------
// MaxUnpool
// ---------------------------------------------------------------------------------------

Status max_unpool_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& ind = *ctx.input(1);
  const Tensor* oshape = ctx.input(2);
  const Attributes& a = ctx.attr();
  KILN_RETURN_IF_ERROR(require_rank_at_least(x, 3, "X"));
  KILN_ENSURE(ind.dtype() == DataType::kInt64, "I must be int64");
  KILN_ENSURE(ind.dims() == x.dims(), "I ", dims_str(ind.dims()), " must have the shape of X ", dims_str(x.dims()));
  const size_t r = static_cast<size_t>(x.rank() - 2);
  KILN_ENSURE(a.has("kernel_shape"), "attribute 'kernel_shape' is required");
  Dims kernel, strides, pads;
  KILN_RETURN_IF_ERROR(spatial_ints(a, "kernel_shape", r, 1, 1, &kernel));
  KILN_RETURN_IF_ERROR(spatial_ints(a, "strides", r, 1, 1, &strides));
  KILN_RETURN_IF_ERROR(spatial_pads(a, r, &pads));
  Dims inferred = {x.dim(0), x.dim(1)};
  for (size_t d = 0; d < r; ++d) {
    const int64_t v = (x.dim(static_cast<int>(d) + 2) - 1) * strides[d] - (pads[d] + pads[d + r]) + kernel[d];
    KILN_ENSURE(v >= 0, "the unpooled extent of spatial axis ", d, " is negative (", v, ")");
    inferred.push_back(v);
  }
  int64_t inf_total = 0, total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements(inferred, &inf_total));
  Dims out_dims = inferred;
  if (oshape) {
    std::vector<int64_t> os;
    KILN_RETURN_IF_ERROR(read_int_vector(*oshape, "output_shape", x.rank(), 0, &os));
    for (size_t d = 0; d < os.size(); ++d) {
      KILN_ENSURE(os[d] >= inferred[d], "output_shape ", dims_str(os), " is smaller than the unpooled shape ",
                  dims_str(inferred));
    }
    out_dims.assign(os.begin(), os.end());
  }
  KILN_RETURN_IF_ERROR(checked_num_elements(out_dims, &total));
  const int64_t* pi = ind.data<int64_t>();
  for (int64_t i = 0; i < ind.size(); ++i) {
    KILN_ENSURE(pi[i] >= 0 && pi[i] < inf_total, "index I[", i, "] = ", pi[i], " is out of range [0, ", inf_total,
                ")");
  }
  // The unpooled tensor (of the inferred shape) sits at the origin of the output_shape tensor.
  const Dims inf_strides = contiguous_strides(inferred), out_strides = contiguous_strides(out_dims);
  return dispatch_numeric_status(ctx.op, x.dtype(), [&]<typename T>() -> Status {
    Tensor& y = ctx.alloc_output(0, x.dtype(), out_dims);
    T* py = y.data<T>();
    std::fill(py, py + total, from_compute<T>(compute_t<T>(0)));
    const T* px = x.data<T>();
    for (int64_t i = 0; i < x.size(); ++i) {
      int64_t rem = pi[i], off = 0;
      for (size_t d = 0; d < inferred.size(); ++d) {
        off += (rem / inf_strides[d]) * out_strides[d];
        rem %= inf_strides[d];
      }
      py[off] = px[i];
    }
    return Status::ok();
  });
}

// ---------------------------------------------------------------------------------------
// TfIdfVectorizer
// ---------------------------------------------------------------------------------------

// The n-gram pool as a trie: the node reached by the items of an n-gram holds its id
// (1-based; 0 for a prefix that is no n-gram of its own).
template <typename Key>
struct NgramTrie {
  struct Node {
    int64_t id = 0;
    std::map<Key, size_t> next;
  };
  std::vector<Node> nodes{Node{}};

  size_t child(size_t at, const Key& k) {
    auto it = nodes[at].next.find(k);
    if (it != nodes[at].next.end()) return it->second;
    nodes.push_back(Node{});
    nodes[at].next.emplace(k, nodes.size() - 1);
    return nodes.size() - 1;
  }
  // -1 when absent.
  int64_t find(size_t at, const Key& k) const {
    auto it = nodes[at].next.find(k);
    return it == nodes[at].next.end() ? -1 : static_cast<int64_t>(it->second);
  }
};

template <typename Key>
Status tfidf_run(KernelContext& ctx, const std::vector<Key>& pool, const std::vector<Key>& items, int64_t rows,
                 int64_t row_len, bool batched) {
  const Attributes& a = ctx.attr();
  const int64_t min_n = a.get_int("min_gram_length", 0), max_n = a.get_int("max_gram_length", 0);
  const int64_t max_skip = a.get_int("max_skip_count", 0);
  KILN_ENSURE(min_n >= 1 && max_n >= min_n, "need 1 <= min_gram_length <= max_gram_length, got ", min_n, " and ",
              max_n);
  KILN_ENSURE(max_skip >= 0, "attribute 'max_skip_count' must be >= 0, got ", max_skip);
  const std::string mode = a.get_string("mode", "");
  KILN_ENSURE(mode == "TF" || mode == "IDF" || mode == "TFIDF", "attribute 'mode' must be TF, IDF or TFIDF, got '",
              mode, "'");
  const std::vector<int64_t> counts = a.get_ints("ngram_counts");
  const std::vector<int64_t> indexes = a.get_ints("ngram_indexes");
  const std::vector<float> weights = a.get_floats("weights");
  KILN_ENSURE(!indexes.empty(), "attribute 'ngram_indexes' must not be empty");
  const int64_t pool_size = static_cast<int64_t>(pool.size());
  int64_t out_size = 0;
  for (int64_t v : indexes) {
    KILN_ENSURE(v >= 0 && v < (int64_t{1} << 28), "ngram_indexes value ", v, " is out of range");
    out_size = std::max(out_size, v + 1);
  }
  KILN_ENSURE(weights.empty() || static_cast<int64_t>(weights.size()) >= out_size, "attribute 'weights' has ",
              weights.size(), " values, expected ", out_size);
  // Build the trie; n-gram ids count every n-gram of the pool, used lengths or not.
  NgramTrie<Key> trie;
  int64_t next_id = 1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t start = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : pool_size;
    KILN_ENSURE(start >= 0 && start <= end && end <= pool_size, "attribute 'ngram_counts' is inconsistent with the pool");
    const int64_t size = static_cast<int64_t>(i) + 1;
    const int64_t ngrams = (end - start) / size;
    if (size < min_n || size > max_n) {
      next_id += ngrams;
      continue;
    }
    for (int64_t g = 0; g < ngrams; ++g) {
      size_t at = 0;
      for (int64_t j = 0; j < size; ++j) at = trie.child(at, pool[static_cast<size_t>(start + g * size + j)]);
      trie.nodes[at].id = next_id++;
    }
  }
  KILN_ENSURE(next_id - 1 <= static_cast<int64_t>(indexes.size()), "attribute 'ngram_indexes' has ", indexes.size(),
              " values but the pool holds ", next_id - 1, " n-grams");

  int64_t total = 0;
  KILN_RETURN_IF_ERROR(checked_num_elements({rows, out_size}, &total));
  std::vector<int64_t> freq(static_cast<size_t>(total), 0);
  // Skip distances beyond the row length find nothing new.
  const int64_t max_dist = std::min(max_skip, row_len) + 1;
  for (int64_t row = 0; row < rows; ++row) {
    const Key* x = items.data() + row * row_len;
    int64_t start_n = min_n;
    for (int64_t dist = 1; dist <= max_dist; ++dist) {
      for (int64_t s = 0; s < row_len; ++s) {
        if (s + dist * (start_n - 1) >= row_len) break;
        size_t at = 0;
        int64_t item = s;
        for (int64_t len = 1; len <= max_n && item < row_len && !trie.nodes[at].next.empty(); ++len, item += dist) {
          const int64_t hit = trie.find(at, x[item]);
          if (hit < 0) break;
          at = static_cast<size_t>(hit);
          const int64_t id = trie.nodes[at].id;
          if (len >= start_n && id != 0) ++freq[static_cast<size_t>(row * out_size + indexes[static_cast<size_t>(id - 1)])];
        }
      }
      if (start_n == 1) {  // unigrams are counted once, at distance 1
        ++start_n;
        if (start_n > max_n) break;
      }
    }
  }
  Dims out_dims = batched ? Dims{rows, out_size} : Dims{out_size};
  Tensor& y = ctx.alloc_output(0, DataType::kFloat32, out_dims);
  float* py = y.data<float>();
  for (int64_t i = 0; i < total; ++i) {
    const double f = static_cast<double>(freq[static_cast<size_t>(i)]);
    const double wv = weights.empty() ? 1.0 : static_cast<double>(weights[static_cast<size_t>(i % out_size)]);
    double v = f;
    if (mode == "IDF") v = f > 0 ? wv : 0.0;
    else if (mode == "TFIDF") v = wv * f;
    py[i] = static_cast<float>(v);
  }
  return Status::ok();
}

Status tfidf_vectorizer_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() <= 2, "input must have shape [C] or [N, C], got ", dims_str(x.dims()));
  const bool batched = x.rank() == 2;
  const int64_t rows = batched ? x.dim(0) : 1;
  const int64_t row_len = x.rank() == 0 ? 1 : x.dims().back();
  KILN_ENSURE(!batched || rows >= 1, "a batched input needs at least one row, got ", dims_str(x.dims()));
  const Attributes& a = ctx.attr();
  if (x.is_string()) {
    KILN_ENSURE(a.has("pool_strings"), "string input needs attribute 'pool_strings'");
    const std::string* px = x.data<std::string>();
    return tfidf_run<std::string>(ctx, a.get_strings("pool_strings"), std::vector<std::string>(px, px + x.size()), rows,
                                  row_len, batched);
  }
  if (x.dtype() != DataType::kInt64 && x.dtype() != DataType::kInt32) return unsupported_dtype(ctx.op, x.dtype());
  KILN_ENSURE(a.has("pool_int64s"), "integer input needs attribute 'pool_int64s'");
  return tfidf_run<int64_t>(ctx, a.get_ints("pool_int64s"), x.to_int_vector(), rows, row_len, batched);
}

}  // namespace

void register_vision_more_kernels(KernelRegistry& r) {
  r.add(Op::Col2Im, col2im_kernel);
  r.add(Op::DeformConv, deform_conv_kernel);
  r.add(Op::MaxUnpool, max_unpool_kernel);
  r.add(Op::TfIdfVectorizer, tfidf_vectorizer_kernel);
}

}  // namespace kiln
