// The CUDA side of ExecutionContext (runtime/cuda_hooks.h): per-layer CUDA tactics with a
// CPU fallback for layers no CUDA kernel serves, one device arena planned by liveness,
// constants uploaded once per setup, pinned host staging for run(), and the whole enqueue
// captured as one CUDA graph (replayed on every execute until shapes or bound addresses
// change). A graph with a data-dependent shape runs on the CPU instead (host mode,
// runtime/cuda_host_mode.cpp); only its copies to and from bound buffers are here.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <unordered_set>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_env.h"
#include "backends/cuda/cuda_kernel.h"
#include "backends/cuda/fused_elementwise.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"
#include "runtime/interpreter.h"

namespace kiln {

namespace {

constexpr size_t kDevAlign = 256;

size_t align_up(size_t n) { return (n + kDevAlign - 1) / kDevAlign * kDevAlign; }

// Host memory from cudaMallocHost (pinned: asynchronous copies at full PCIe speed).
class PinnedBuffer {
 public:
  ~PinnedBuffer() { reset(); }
  Status reserve(size_t bytes) {
    if (bytes <= n_) return Status::ok();
    reset();
    KILN_CUDA_CHECK(cudaMallocHost(&p_, bytes));
    n_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  std::byte* get() const { return static_cast<std::byte*>(p_); }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct CudaStep {
  const cuda::Tactic* tactic = nullptr;       // null: CPU fallback
  std::unique_ptr<cuda::Kernel> kernel;
  std::vector<const Tensor*> in;              // device views (constants: their device copies)
  std::vector<Tensor*> out;
  // CPU fallback: host staging for non-constant inputs and for outputs.
  std::vector<Tensor> host_in, host_out;
  cudaEvent_t start = nullptr, stop = nullptr;  // profiling
};

struct CudaState {
  std::unique_ptr<cuda::EnvHolder> env;
  cudaStream_t stream = nullptr;
  cuda::DeviceBuffer arena, inputs, consts;
  std::vector<Tensor> const_dev;    // per slot: the device copy of a constant
  std::vector<CudaStep> steps;
  size_t workspace_bytes = 0;
  void* workspace = nullptr;
  std::map<std::string, size_t> input_offset;  // context-owned input buffers
  PinnedBuffer staging;
  size_t staging_bytes = 0;
  int fallbacks = 0;
  cudaGraphExec_t exec = nullptr;
  std::vector<const void*> captured;  // slot addresses the graph was captured with
  bool capture_failed = false;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  double last_gpu_ms = -1;

  ~CudaState() {
    destroy_graph();
    for (CudaStep& s : steps) destroy_events(s);
    if (ev0) cudaEventDestroy(ev0);
    if (ev1) cudaEventDestroy(ev1);
    if (stream) cudaStreamDestroy(stream);
  }
  void destroy_graph() {
    if (exec) cudaGraphExecDestroy(exec);
    exec = nullptr;
    captured.clear();
  }
  static void destroy_events(CudaStep& s) {
    if (s.start) cudaEventDestroy(s.start);
    if (s.stop) cudaEventDestroy(s.stop);
    s.start = s.stop = nullptr;
  }
};

CudaState& state_of(ContextImpl& c) { return *static_cast<CudaState*>(c.cuda.get()); }


// Times one tactic on random device data at the step's shapes (build time only).
double time_tactic(const cuda::Tactic& t, const cuda::LayerSpec& spec, const std::vector<cuda::TensorShape>& ins,
                   const std::vector<cuda::TensorShape>& outs, cudaStream_t stream) {
  auto k = t.create(spec);
  if (!k) return -1;
  size_t ws = 0;
  if (!k.value()->prepare(ins, outs, &ws).is_ok()) return -1;
  std::vector<cuda::DeviceBuffer> bufs(ins.size() + outs.size() + 1);
  std::vector<Tensor> views(ins.size() + outs.size());
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i].dtype == DataType::kUndefined) {
      in_ptrs.push_back(nullptr);
      continue;
    }
    Tensor host;
    if (spec.constants[i]) {
      host = *spec.constants[i];
    } else {
      host = Tensor(ins[i].dtype, ins[i].dims);
      if (host.nbytes()) std::memset(host.raw(), 0, host.nbytes());  // valid indices for int inputs
      dispatch_all(ins[i].dtype, [&]<typename T>() {
        if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          T* p = host.data<T>();
          for (int64_t j = 0; j < host.size(); ++j) p[j] = convert_element<T>(dist(rng));
        }
      });
    }
    if (!bufs[i].upload(host.raw(), std::max<size_t>(host.nbytes(), 1)).is_ok()) return -1;
    views[i] = Tensor::wrap(ins[i].dtype, ins[i].dims, bufs[i].get());
    in_ptrs.push_back(&views[i]);
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    if (outs[o].dtype == DataType::kUndefined) {
      out_ptrs.push_back(nullptr);
      continue;
    }
    const size_t bytes = static_cast<size_t>(num_elements(outs[o].dims)) * dtype_size(outs[o].dtype);
    if (!bufs[ins.size() + o].reserve(std::max<size_t>(bytes, 1)).is_ok()) return -1;
    views[ins.size() + o] = Tensor::wrap(outs[o].dtype, outs[o].dims, bufs[ins.size() + o].get());
    out_ptrs.push_back(&views[ins.size() + o]);
  }
  cuda::DeviceBuffer& wsb = bufs.back();
  if (!wsb.reserve(std::max<size_t>(ws, 1)).is_ok()) return -1;
  cudaEvent_t a = nullptr, b = nullptr;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  double best = -1;
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) ok = k.value()->enqueue(in_ptrs, out_ptrs, wsb.get(), stream).is_ok();
  constexpr int kReps = 10;
  if (ok && cudaStreamSynchronize(stream) == cudaSuccess) {
    cudaEventRecord(a, stream);
    for (int i = 0; i < kReps && ok; ++i) ok = k.value()->enqueue(in_ptrs, out_ptrs, wsb.get(), stream).is_ok();
    cudaEventRecord(b, stream);
    float ms = 0;
    if (ok && cudaEventSynchronize(b) == cudaSuccess && cudaEventElapsedTime(&ms, a, b) == cudaSuccess) {
      best = static_cast<double>(ms) / kReps;
    }
  }
  cudaGetLastError();  // a failed candidate must not poison later calls
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

Status run_fallback(ContextImpl& c, CudaState& st, size_t i, cudaStream_t stream) {
  Step& step = c.steps[i];
  CudaStep& cs = st.steps[i];
  const Node& n = *step.node;
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<const Tensor*> ins;
  for (size_t k = 0; k < step.in.size(); ++k) {
    const int s = step.in[k];
    if (s < 0) {
      ins.push_back(nullptr);
      continue;
    }
    const Slot& slot = c.slots[static_cast<size_t>(s)];
    if (slot.kind == SlotKind::kConstant) {
      ins.push_back(&slot.t);
      continue;
    }
    Tensor& h = cs.host_in[k];
    if (h.nbytes()) KILN_CUDA_CHECK(cudaMemcpy(h.raw(), slot.t.raw(), h.nbytes(), cudaMemcpyDeviceToHost));
    ins.push_back(&h);
  }
  KernelContext kc;
  kc.op = n.op();
  kc.attrs = &n.attrs;
  kc.inputs = ins;
  kc.outputs.resize(step.out.size());
  for (size_t k = 0; k < step.out.size(); ++k) {
    kc.output_wanted.push_back(step.out[k] >= 0);
    if (step.out[k] >= 0) kc.outputs[k] = cs.host_out[k];
  }
  // Subgraph bodies read outer values: host copies, made on demand.
  std::map<std::string, Tensor> host_values;
  const Graph& g = *c.spec;
  auto lookup = [&](const std::string& name) -> const Tensor* {
    Value* v = g.find_value(name);
    if (!v) return nullptr;
    auto it = c.slot_of.find(v);
    if (it == c.slot_of.end()) return nullptr;
    const Slot& slot = c.slots[static_cast<size_t>(it->second)];
    if (slot.kind == SlotKind::kConstant) return &slot.t;
    auto h = host_values.find(name);
    if (h != host_values.end()) return &h->second;
    Tensor t(slot.dtype, slot.dims);
    if (t.nbytes() && cudaMemcpy(t.raw(), slot.t.raw(), t.nbytes(), cudaMemcpyDeviceToHost) != cudaSuccess) return nullptr;
    return &host_values.emplace(name, std::move(t)).first->second;
  };
  kc.run_subgraph = [&lookup](const Graph& sub, const std::vector<Tensor>& in) {
    return execute_graph(sub, in, lookup, nullptr);
  };
  Status s = step.reference(kc);
  if (!s.is_ok()) return s.with_context(n.describe() + " (CPU fallback): ");
  for (size_t k = 0; k < step.out.size(); ++k) {
    const int si = step.out[k];
    if (si < 0) continue;
    Slot& slot = c.slots[static_cast<size_t>(si)];
    const Tensor& r = kc.outputs[k];
    if (!r.defined() || r.dtype() != slot.dtype || r.dims() != slot.dims || r.is_sequence()) {
      return internal_error(n.describe(), " (CPU fallback): output ", k, " is ", r.defined() ? r.describe() : "missing",
                            " but shape inference planned ", dtype_name(slot.dtype), dims_str(slot.dims));
    }
    if (r.nbytes()) KILN_CUDA_CHECK(cudaMemcpyAsync(slot.t.raw(), r.raw(), r.nbytes(), cudaMemcpyHostToDevice, stream));
  }
  // The copies read host memory that the next fallback may overwrite: finish them.
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status enqueue_steps(ContextImpl& c, CudaState& st, cudaStream_t stream, bool profile) {
  for (size_t i = 0; i < st.steps.size(); ++i) {
    CudaStep& cs = st.steps[i];
    if (profile) KILN_CUDA_CHECK(cudaEventRecord(cs.start, stream));
    if (c.steps[i].view) {
      // The output shares the input's device memory (ContextImpl::find_views): no kernel.
    } else if (cs.kernel) {
      Status s = cs.kernel->enqueue(cs.in, cs.out, st.workspace, stream);
      if (!s.is_ok()) return s.with_context(cat(c.steps[i].node->describe(), " [", cs.tactic->name, "]: "));
    } else {
      KILN_RETURN_IF_ERROR(run_fallback(c, st, i, stream));
    }
    if (profile) KILN_CUDA_CHECK(cudaEventRecord(cs.stop, stream));
    if (c.step_observer) {
      KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<Tensor> host;
      std::vector<Tensor*> ptrs;
      host.reserve(c.steps[i].out.size());
      for (int s : c.steps[i].out) {
        if (s < 0) {
          ptrs.push_back(nullptr);
          continue;
        }
        const Slot& slot = c.slots[static_cast<size_t>(s)];
        host.emplace_back(slot.dtype, slot.dims);
        if (host.back().nbytes()) {
          KILN_CUDA_CHECK(cudaMemcpy(host.back().raw(), slot.t.raw(), host.back().nbytes(), cudaMemcpyDeviceToHost));
        }
        ptrs.push_back(&host.back());
      }
      c.step_observer(*c.steps[i].node, ptrs);
    }
  }
  // Graph outputs that are constants (folded at build time) go to a caller's bound buffer
  // by copy; outputs computed by a layer were written there in place.
  for (Value* o : c.spec->outputs()) {
    auto b = c.bound.find(o->name());
    const int s = c.slot_of.at(o);
    if (b == c.bound.end() || c.slots[static_cast<size_t>(s)].kind != SlotKind::kConstant) continue;
    const Tensor& dev = st.const_dev[static_cast<size_t>(s)];
    if (dev.nbytes()) KILN_CUDA_CHECK(cudaMemcpyAsync(b->second, dev.raw(), dev.nbytes(), cudaMemcpyDeviceToDevice, stream));
  }
  return Status::ok();
}

// Addresses of every non-constant slot: a graph captured with other addresses is stale.
std::vector<const void*> slot_addresses(const ContextImpl& c) {
  std::vector<const void*> a;
  a.reserve(c.slots.size());
  for (const Slot& s : c.slots) a.push_back(s.kind == SlotKind::kConstant ? nullptr : s.t.raw());
  return a;
}

Status capture_graph(ContextImpl& c, CudaState& st) {
  st.destroy_graph();
  KILN_CUDA_CHECK(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeThreadLocal));
  Status s = enqueue_steps(c, st, st.stream, false);
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(st.stream, &graph);
  if (!s.is_ok()) {
    if (graph) cudaGraphDestroy(graph);
    return s;
  }
  KILN_CUDA_CHECK(e);
  e = cudaGraphInstantiate(&st.exec, graph, 0);
  cudaGraphDestroy(graph);
  KILN_CUDA_CHECK(e);
  st.captured = slot_addresses(c);
  return Status::ok();
}

}  // namespace

bool cuda_compiled() { return true; }

Status cuda_device_status() {
  std::string why;
  if (!cuda::device_available(&why)) return unsupported("no usable CUDA device: ", why);
  return Status::ok();
}

std::string cuda_library_versions() { return cuda::library_versions(); }

Status cuda_setup(ContextImpl& c) {
  if (!c.cuda) {
    auto st = std::make_shared<CudaState>();
    const bool tf32 = c.e->precision.is_object() && c.e->precision.value("tf32", false);
    KILN_ASSIGN_OR_RETURN(st->env, cuda::EnvHolder::create(tf32));
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    KILN_CUDA_CHECK(cudaEventCreate(&st->ev0));
    KILN_CUDA_CHECK(cudaEventCreate(&st->ev1));
    c.cuda = st;
  }
  CudaState& st = state_of(c);
  st.destroy_graph();
  st.capture_failed = false;
  for (CudaStep& s : st.steps) CudaState::destroy_events(s);
  st.steps.clear();
  st.const_dev.assign(c.slots.size(), Tensor());
  st.workspace_bytes = 0;
  st.fallbacks = 0;
  st.input_offset.clear();
  Graph& g = *c.spec;

  // 1. A CUDA tactic per layer: the plan's if it still applies, else the fastest (build:
  // timed) or first that prepares; else the CPU reference kernel.
  const std::vector<Node*> nodes = g.nodes();
  size_t fallback_bytes = 0;
  std::vector<std::string> fallback_names;
  for (Node* n : nodes) {
    Step step;
    step.node = n;
    step.reference = reference_kernels().find(n->op());
    CudaStep cs;
    cuda::LayerSpec ls;
    ls.op = n->op();
    ls.attrs = &n->attrs;
    ls.env = &st.env->env;
    std::vector<cuda::TensorShape> in_shapes, out_shapes;
    for (Value* v : n->inputs()) {
      step.in.push_back(v ? c.slot_of.at(v) : -1);
      ls.input_dtypes.push_back(v ? v->dtype : DataType::kUndefined);
      ls.constants.push_back(v && v->is_constant() ? &v->constant() : nullptr);
      if (v && !has_static_shape(v)) {  // ContextImpl::setup chooses host mode for these
        return internal_error(n->describe(), ": input '", v->name(), "' has shape ", sym_shape_str(v->shape),
                              " but the context is not in host mode");
      }
      in_shapes.push_back(v ? cuda::TensorShape{v->dtype, static_dims(*v)} : cuda::TensorShape{});
    }
    for (Value* o : n->outputs()) {
      step.out.push_back(o ? c.slot_of.at(o) : -1);
      ls.output_dtypes.push_back(o ? o->dtype : DataType::kUndefined);
      if (o && !has_static_shape(o)) {
        return internal_error(n->describe(), ": output '", o->name(), "' has shape ", sym_shape_str(o->shape),
                              " but the context is not in host mode");
      }
      out_shapes.push_back(o ? cuda::TensorShape{o->dtype, static_dims(*o)} : cuda::TensorShape{});
    }
    std::vector<const cuda::Tactic*> cands = n->subgraphs().empty() ? cuda::tactics_for(ls) : std::vector<const cuda::Tactic*>{};
    auto li = c.e->layer_of.find(layer_key(*n));
    if (li != c.e->layer_of.end()) {
      const std::string& want = c.e->layers[li->second].tactic;
      for (size_t i = 0; i < cands.size(); ++i) {
        if (want == cands[i]->name) std::rotate(cands.begin(), cands.begin() + static_cast<long>(i), cands.begin() + static_cast<long>(i) + 1);
      }
    }
    if (c.chooser && cands.size() > 1) {
      const cuda::Tactic* best = nullptr;
      double best_ms = 0;
      for (const cuda::Tactic* t : cands) {
        // Cached per GPU model: a timing from another GPU says nothing about this one.
        const std::string key = cat(st.env->env.name, "/", t->name);
        double ms = c.chooser->cached_ms(step, key);
        if (ms < 0) {
          ms = time_tactic(*t, ls, in_shapes, out_shapes, st.stream);
          if (ms < 0) continue;
          c.chooser->store_ms(step, key, ms);
        }
        if (!best || ms < best_ms) {
          best = t;
          best_ms = ms;
        }
      }
      if (best) {
        cands.erase(std::find(cands.begin(), cands.end(), best));
        cands.insert(cands.begin(), best);
        c.chooser->chose(step, best_ms);
      }
    }
    for (const cuda::Tactic* t : cands) {
      auto k = t->create(ls);
      if (!k) continue;
      size_t ws = 0;
      if (!k.value()->prepare(in_shapes, out_shapes, &ws).is_ok()) {
        cudaGetLastError();
        continue;
      }
      cs.tactic = t;
      cs.kernel = std::move(k).value();
      st.workspace_bytes = std::max(st.workspace_bytes, ws);
      break;
    }
    if (cs.kernel) {
      step.device_tactic = cs.tactic->name;
    } else {
      if (!step.reference) return unsupported(n->describe(), ": no kernel (CUDA or CPU) for ", op_name(n->op()));
      ++st.fallbacks;
      fallback_names.push_back(cat(n->describe()));
      for (size_t k = 0; k < in_shapes.size(); ++k) {
        const int s = step.in[k];
        const bool host_needed = s >= 0 && c.slots[static_cast<size_t>(s)].kind != SlotKind::kConstant;
        cs.host_in.push_back(host_needed ? Tensor(in_shapes[k].dtype, in_shapes[k].dims) : Tensor());
        if (host_needed) fallback_bytes += cs.host_in.back().nbytes();
      }
      for (const cuda::TensorShape& o : out_shapes) {
        cs.host_out.push_back(o.dtype == DataType::kUndefined ? Tensor() : Tensor(o.dtype, o.dims));
        fallback_bytes += cs.host_out.back().nbytes();
      }
    }
    c.steps.push_back(std::move(step));
    st.steps.push_back(std::move(cs));
  }
  if (!fallback_names.empty()) {
    std::string list;
    for (size_t i = 0; i < fallback_names.size() && i < 8; ++i) list += (i ? ", " : "") + fallback_names[i];
    if (fallback_names.size() > 8) list += cat(", and ", fallback_names.size() - 8, " more");
    default_logger().log(LogSeverity::kWarning,
                         cat(fallback_names.size(), " layer(s) have no CUDA kernel and run on the CPU (", list, "); each ",
                             "inference copies ", fallback_bytes, " bytes between host and device for them and cannot ",
                             "use a CUDA graph"));
  }

  // 2. Device memory: activations by liveness, then the workspace; inputs and constants
  // in buffers of their own. Reshape-like layers alias their input: one buffer, whose life
  // spans the whole chain.
  std::vector<int> arena_slots;
  const std::vector<int> views = c.find_views();
  MemoryPlan mp = c.plan_arena(views, kDevAlign, &arena_slots);
  c.activation_bytes = mp.arena_bytes;
  c.scratch_bytes = st.workspace_bytes;
  const size_t need = align_up(mp.arena_bytes) + align_up(st.workspace_bytes) + kDevAlign;
  if (c.e->memory_limit_bytes && need > c.e->memory_limit_bytes) {
    return invalid_argument("these input shapes need ", need, " bytes of device memory for activations, over the engine's ",
                            "limit of ", c.e->memory_limit_bytes, " bytes");
  }
  KILN_RETURN_IF_ERROR(st.arena.reserve(need));
  auto* base = static_cast<std::byte*>(st.arena.get());
  for (size_t i = 0; i < arena_slots.size(); ++i) {
    Slot& s = c.slots[static_cast<size_t>(arena_slots[i])];
    s.offset = mp.offsets[i];
    s.t = Tensor::wrap(s.dtype, s.dims, base + s.offset);
  }
  st.workspace = base + align_up(mp.arena_bytes);
  size_t in_bytes = 0, const_bytes = 0;
  for (Slot& s : c.slots) {
    if (s.kind == SlotKind::kInput) {
      st.input_offset[s.name] = in_bytes;
      in_bytes += align_up(static_cast<size_t>(num_elements(s.dims)) * dtype_size(s.dtype));
    } else if (s.kind == SlotKind::kConstant) {
      const_bytes += align_up(s.t.nbytes());
    }
  }
  KILN_RETURN_IF_ERROR(st.inputs.reserve(std::max<size_t>(in_bytes, 1)));
  KILN_RETURN_IF_ERROR(st.consts.reserve(std::max<size_t>(const_bytes, 1)));
  size_t coff = 0;
  for (size_t i = 0; i < c.slots.size(); ++i) {
    Slot& s = c.slots[i];
    if (s.kind == SlotKind::kInput) {
      s.t = Tensor::wrap(s.dtype, s.dims, static_cast<std::byte*>(st.inputs.get()) + st.input_offset[s.name]);
    } else if (s.kind == SlotKind::kConstant) {
      auto* p = static_cast<std::byte*>(st.consts.get()) + coff;
      if (s.t.nbytes()) KILN_CUDA_CHECK(cudaMemcpy(p, s.t.raw(), s.t.nbytes(), cudaMemcpyHostToDevice));
      st.const_dev[i] = Tensor::wrap(s.t.dtype(), s.t.dims(), p);
      coff += align_up(s.t.nbytes());
    }
  }
  // Caller buffers (device memory) bound before setup.
  for (Slot& s : c.slots) {
    auto b = c.bound.find(s.name);
    if (b != c.bound.end() && (s.kind == SlotKind::kInput || s.kind == SlotKind::kArena || s.kind == SlotKind::kBound)) {
      if (s.kind == SlotKind::kArena) s.kind = SlotKind::kBound;
      s.t = Tensor::wrap(s.dtype, s.dims, b->second);
    }
  }
  // Pinned staging for run(): all inputs and outputs.
  st.staging_bytes = in_bytes;
  for (Value* o : g.outputs()) {
    const Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(o))];
    st.staging_bytes += align_up(static_cast<size_t>(num_elements(s.dims)) * dtype_size(s.dtype));
  }
  KILN_RETURN_IF_ERROR(st.staging.reserve(std::max<size_t>(st.staging_bytes, 1)));

  // 3. Each step's device tensor pointers, fixed from now on (slots do not move).
  for (size_t i = 0; i < c.steps.size(); ++i) {
    CudaStep& cs = st.steps[i];
    for (int s : c.steps[i].in) {
      if (s < 0) {
        cs.in.push_back(nullptr);
      } else if (c.slots[static_cast<size_t>(s)].kind == SlotKind::kConstant) {
        cs.in.push_back(&st.const_dev[static_cast<size_t>(s)]);
      } else {
        cs.in.push_back(&c.slots[static_cast<size_t>(s)].t);
      }
    }
    for (int s : c.steps[i].out) cs.out.push_back(s >= 0 ? &c.slots[static_cast<size_t>(s)].t : nullptr);
    KILN_CUDA_CHECK(cudaEventCreate(&cs.start));
    KILN_CUDA_CHECK(cudaEventCreate(&cs.stop));
  }
  return Status::ok();
}

Status cuda_execute(ContextImpl& c, void* user_stream, bool sync) {
  if (c.host_mode) return c.run_host_mode(user_stream);  // complete on return, as if synchronized
  CudaState& st = state_of(c);
  for (Value* in : c.spec->inputs()) {
    const Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(in))];
    if (!s.t.raw() && num_elements(s.dims) > 0) {
      return invalid_argument("input '", in->name(), "' has no device buffer; bind one with set_tensor_address");
    }
  }
  cudaStream_t stream = user_stream ? static_cast<cudaStream_t>(user_stream) : st.stream;
  const bool profile = c.profiling;
  const bool use_graph = c.use_cuda_graphs && st.fallbacks == 0 && !profile && !c.step_observer && !st.capture_failed;
  st.last_gpu_ms = -1;
  if (use_graph && (!st.exec || st.captured != slot_addresses(c))) {
    Status s = capture_graph(c, st);
    if (!s.is_ok()) {
      cudaGetLastError();
      st.capture_failed = true;
      default_logger().log(LogSeverity::kWarning, "CUDA graph capture failed, running layer by layer: " + s.message());
    }
  }
  KILN_CUDA_CHECK(cudaEventRecord(st.ev0, stream));
  if (use_graph && st.exec) {
    KILN_CUDA_CHECK(cudaGraphLaunch(st.exec, stream));
  } else {
    KILN_RETURN_IF_ERROR(enqueue_steps(c, st, stream, profile));
  }
  KILN_CUDA_CHECK(cudaEventRecord(st.ev1, stream));
  if (sync || profile) {
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    float ms = 0;
    if (cudaEventElapsedTime(&ms, st.ev0, st.ev1) == cudaSuccess) st.last_gpu_ms = ms;
    if (profile) {
      for (size_t i = 0; i < st.steps.size(); ++i) {
        float t = 0;
        if (cudaEventElapsedTime(&t, st.steps[i].start, st.steps[i].stop) == cudaSuccess) c.steps[i].total_ms += t;
        ++c.steps[i].runs;
      }
    }
  }
  return Status::ok();
}

Status cuda_upload_inputs(ContextImpl& c, const std::map<std::string, Tensor>& host) {
  if (c.host_mode) return c.host_upload_inputs(host);
  CudaState& st = state_of(c);
  std::byte* stage = st.staging.get();
  for (const auto& [name, t] : host) {
    Value* v = c.spec->find_value(name);
    auto off = st.input_offset.find(name);
    if (!v || off == st.input_offset.end()) return invalid_argument("'", name, "' is not an input of the engine");
    Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(v))];
    if (t.dtype() != s.dtype || t.dims() != s.dims) {
      return invalid_argument("input '", name, "': got ", t.describe(), ", the context is set up for ", dtype_name(s.dtype),
                              dims_str(s.dims));
    }
    void* dev = static_cast<std::byte*>(st.inputs.get()) + off->second;
    s.t = Tensor::wrap(s.dtype, s.dims, dev);  // the context's own buffer (a bound one is released)
    if (t.nbytes()) {
      std::memcpy(stage + off->second, t.raw(), t.nbytes());
      KILN_CUDA_CHECK(cudaMemcpyAsync(dev, stage + off->second, t.nbytes(), cudaMemcpyHostToDevice, st.stream));
    }
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return Status::ok();
}

Result<Tensor> cuda_download(ContextImpl& c, const std::string& name) {
  if (c.host_mode) {
    KILN_ASSIGN_OR_RETURN(Tensor t, c.host_value(name));
    return t.clone();
  }
  CudaState& st = state_of(c);
  Value* v = c.spec->find_value(name);
  if (!v) return invalid_argument("unknown tensor '", name, "'");
  const Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(v))];
  if (s.kind == SlotKind::kConstant) return s.t.clone();
  Tensor out(s.dtype, s.dims);
  if (out.nbytes() > st.staging_bytes) {
    KILN_CUDA_CHECK(cudaStreamSynchronize(st.stream));
    KILN_CUDA_CHECK(cudaMemcpy(out.raw(), s.t.raw(), out.nbytes(), cudaMemcpyDeviceToHost));
  } else if (out.nbytes()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(st.staging.get(), s.t.raw(), out.nbytes(), cudaMemcpyDeviceToHost, st.stream));
    KILN_CUDA_CHECK(cudaStreamSynchronize(st.stream));
    std::memcpy(out.raw(), st.staging.get(), out.nbytes());
  }
  return out;
}

Status cuda_attach_kernels(ContextImpl& c, Graph& g) {
  if (!c.cuda) return Status::ok();
  CudaState& st = state_of(c);
  for (const Step& step : c.steps) {
    if (!step.device_tactic || std::string(step.device_tactic) != "nvrtc_fused") continue;
    const Node& n = *step.node;
    Value* key = g.find_value(layer_key(n));
    Node* target = key ? key->producer() : nullptr;
    if (!target || target->op() != Op::FusedElementwise) continue;  // folded or renamed: compiled at load
    cuda::LayerSpec ls;
    ls.op = n.op();
    ls.attrs = &n.attrs;
    ls.env = &st.env->env;
    for (Value* v : n.inputs()) {
      ls.input_dtypes.push_back(v ? v->dtype : DataType::kUndefined);
      ls.constants.push_back(v && v->is_constant() ? &v->constant() : nullptr);
    }
    for (Value* o : n.outputs()) ls.output_dtypes.push_back(o ? o->dtype : DataType::kUndefined);
    KILN_RETURN_IF_ERROR(cuda::attach_fused_elementwise_cubin(ls, &target->attrs).with_context(n.describe() + ": "));
  }
  return Status::ok();
}

void cuda_set_graphs(ContextImpl& c, bool on) {
  c.use_cuda_graphs = on;
  if (!on && c.cuda) state_of(c).destroy_graph();
}

double cuda_last_gpu_ms(const ContextImpl& c) {
  return c.cuda && !c.host_mode ? static_cast<const CudaState*>(c.cuda.get())->last_gpu_ms : -1;
}

bool cuda_uses_graph(const ContextImpl& c) {
  return c.cuda && !c.host_mode && static_cast<const CudaState*>(c.cuda.get())->exec != nullptr;
}

int cuda_fallback_layers(const ContextImpl& c) {
  if (c.host_mode) return static_cast<int>(c.steps.size());
  return c.cuda ? static_cast<const CudaState*>(c.cuda.get())->fallbacks : 0;
}

void cuda_release_device_memory(ContextImpl& c) {
  if (!c.cuda) return;
  CudaState& st = state_of(c);
  st.destroy_graph();
  st.capture_failed = false;
  for (CudaStep& s : st.steps) CudaState::destroy_events(s);
  st.steps.clear();
  st.const_dev.clear();
  st.arena.reset();
  st.inputs.reset();
  st.consts.reset();
  st.staging.reset();
  st.staging_bytes = 0;
  st.input_offset.clear();
  st.workspace = nullptr;
  st.workspace_bytes = 0;
  st.fallbacks = 0;
  st.last_gpu_ms = -1;
}

Status cuda_copy(void* dst, const void* src, size_t bytes, void* stream) {
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Status cuda_wait(void* stream) {
  KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

}  // namespace kiln
