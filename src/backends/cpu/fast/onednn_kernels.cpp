// The oneDNN tactic family: shared plumbing (onednn_common.h) and the registration of the
// conv, matmul and pooling tactics, which live in their own files.
#include <omp.h>

#include <algorithm>
#include <limits>

#include "backends/cpu/fast/onednn_common.h"

namespace kiln::fast {

namespace onednn {

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

Status from_dnnl(const char* kernel, const dnnl::error& e) {
  const StatusCode code = e.status == dnnl_unimplemented ? StatusCode::kUnsupported : StatusCode::kInternal;
  return Status(code, cat(kernel, ": oneDNN: ", e.what(), " (status ", static_cast<int>(e.status), ")"));
}

ThreadScope::ThreadScope(int threads) : saved_(omp_get_max_threads()), changed_(threads > 0 && threads != saved_) {
  if (changed_) omp_set_num_threads(threads);
}

ThreadScope::~ThreadScope() {
  if (changed_) omp_set_num_threads(saved_);
}

Status Slot::bind(const void* ptr) {
  if (last == ptr) return Status::ok();
  // oneDNN takes a mutable handle; inputs are only read through it.
  const dnnl_status_t st = dnnl_memory_set_data_handle(mem.get(), const_cast<void*>(ptr));
  if (st != dnnl_success) return internal_error("oneDNN: could not set a memory handle (status ", static_cast<int>(st), ")");
  last = ptr;
  return Status::ok();
}

void Exec::reset(dnnl::primitive prim, const dnnl::primitive_desc_base& pd) {
  prim_ = std::move(prim);
  args_.clear();
  const dnnl::memory::desc sp = pd.scratchpad_desc();
  scratchpad_bytes_ = sp.get_size();
  if (scratchpad_bytes_ > 0) {
    scratchpad_.make(sp);
    arg(DNNL_ARG_SCRATCHPAD, scratchpad_.mem);
  }
}

Status Exec::run(const dnnl::stream& s, void* scratchpad, const char* kernel) {
  if (scratchpad_bytes_ > 0) KILN_RETURN_IF_ERROR(scratchpad_.bind(scratchpad));
  dnnl_status_t st = dnnl_primitive_execute(prim_.get(), s.get(), static_cast<int>(args_.size()), args_.data());
  if (st == dnnl_success) st = dnnl_stream_wait(s.get());
  if (st != dnnl_success) return internal_error(kernel, ": oneDNN execution failed (status ", static_cast<int>(st), ")");
  return Status::ok();
}

bool activation_post_ops(const Attributes& a, std::vector<Eltwise>* out) {
  using dnnl::algorithm;
  out->clear();
  const std::string act = a.get_string("activation", "None");
  const float inf = std::numeric_limits<float>::infinity();
  if (act == "None") return true;
  if (act == "Relu") {
    out->push_back({algorithm::eltwise_relu, 0.0f, 0.0f});
  } else if (act == "LeakyRelu") {
    out->push_back({algorithm::eltwise_relu, a.get_float("alpha", 0.01f), 0.0f});
  } else if (act == "Clip") {
    const float lo = a.has("min") ? a.get_float("min", 0.0f) : -inf;
    const float hi = a.has("max") ? a.get_float("max", 0.0f) : inf;
    if (!(lo <= hi)) return false;  // Clip with min > max (or NaN bounds): leave to the reference
    out->push_back({algorithm::eltwise_clip, lo, hi});
  } else if (act == "Sigmoid") {
    out->push_back({algorithm::eltwise_logistic, 0.0f, 0.0f});
  } else if (act == "HardSigmoid") {  // oneDNN 2.6 has no hardsigmoid: max(0, min(1, alpha*x + beta))
    out->push_back({algorithm::eltwise_linear, a.get_float("alpha", 0.2f), a.get_float("beta", 0.5f)});
    out->push_back({algorithm::eltwise_clip, 0.0f, 1.0f});
  } else if (act == "HardSwish") {  // x * relu6(x + 3) / 6 == ONNX HardSwish (alpha 1/6, beta 0.5)
    out->push_back({algorithm::eltwise_hardswish, 0.0f, 0.0f});
  } else if (act == "SiLU") {
    out->push_back({algorithm::eltwise_swish, 1.0f, 0.0f});
  } else if (act == "Swish") {
    out->push_back({algorithm::eltwise_swish, a.get_float("alpha", 1.0f), 0.0f});
  } else if (act == "Tanh") {
    out->push_back({algorithm::eltwise_tanh, 0.0f, 0.0f});
  } else if (act == "Gelu") {
    const std::string approx = a.get_string("approximate", "none");
    if (approx == "none") {
      out->push_back({algorithm::eltwise_gelu_erf, 0.0f, 0.0f});
    } else if (approx == "tanh") {
      out->push_back({algorithm::eltwise_gelu_tanh, 0.0f, 0.0f});
    } else {
      return false;
    }
  } else {
    return false;
  }
  return true;
}

dnnl::post_ops make_post_ops(const std::vector<Eltwise>& eltwise, bool sum_first, float sum_scale) {
  dnnl::post_ops po;
  if (sum_first) po.append_sum(sum_scale);
  for (const Eltwise& e : eltwise) po.append_eltwise(1.0f, e.alg, e.alpha, e.beta);
  return po;
}

dnnl::reorder::primitive_desc reorder_pd(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to, attr);
}

dnnl::memory::dims plain_strides(const dnnl::memory::dims& dims) {
  dnnl::memory::dims s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * std::max<dnnl::memory::dim>(dims[i], 1);
  return s;
}

dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, plain_strides(dims));
}

}  // namespace onednn

void add_onednn_tactics(std::vector<Tactic>& out) {
  onednn::add_conv_tactics(out);
  onednn::add_matmul_tactics(out);
  onednn::add_pool_tactics(out);
}

}  // namespace kiln::fast
