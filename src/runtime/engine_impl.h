// Internals behind the public Engine and ExecutionContext (include/kiln/kiln.h).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/fast/fast_kernel.h"
#include "backends/cpu/reference/kernel.h"
#include "builder/plan_file.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "runtime/memory_plan.h"

namespace kiln {

struct EngineImpl {
  std::shared_ptr<PlanStorage> storage;  // the plan's bytes; weights are views into it
  PlanSections plan;
  std::unique_ptr<Graph> graph;          // the optimized graph, shapes inferred
  DeviceKind device = DeviceKind::kCPU;
  std::string arch;                      // "x86_64"
  std::string libraries;                 // "onednn 2.6.3"
  std::vector<TensorDesc> inputs, outputs;
  std::vector<OptimizationProfile> profiles;
  std::vector<LayerInfo> layers;
  std::unordered_map<std::string, size_t> layer_of;  // first output name -> index in layers
  BuildSummary summary;
  int threads = 0;
  size_t memory_limit_bytes = 0;
  nlohmann::json precision;              // the build's precision flags
};

// Metadata <-> EngineImpl fields (engine.cpp).
nlohmann::json engine_meta(const EngineImpl& e);
Status parse_engine_meta(const nlohmann::json& meta, EngineImpl* e);
// Target of this process ("x86_64").
std::string host_arch();

// Helpers shared by the CPU and CUDA execution contexts (execution_context.cpp).
// The name identifying a layer in the plan's layer table: its first output's name.
std::string layer_key(const Node& n);
// Whether a value is a plain tensor whose dtype and every dim are known, and those dims.
bool has_static_shape(const Value* v);
Dims static_dims(const Value& v);
// Why a CUDA context cannot plan device memory for graph `g` (specialized to the input
// shapes): the first node with an input or output whose shape is not known before running
// (a data-dependent shape, a sequence, a string tensor), as "node 'X' (Op): output 'y' has a
// data-dependent shape [?, 2]"; "" when every shape is known (runtime/cuda_host_mode.cpp).
std::string data_dependent_shape_reason(const Graph& g);

// Where a value lives during execution.
enum class SlotKind { kInput, kConstant, kArena, kBound, kDynamic };

struct Slot {
  Tensor t;
  SlotKind kind = SlotKind::kDynamic;
  DataType dtype = DataType::kUndefined;
  Dims dims;                  // static dims for kInput/kArena/kBound
  size_t offset = 0;          // kArena: offset in the arena
  std::string name;
};

struct Step {
  Node* node = nullptr;
  const fast::Tactic* tactic = nullptr;  // null: the reference kernel
  std::unique_ptr<fast::Kernel> kernel;
  KernelFn reference = nullptr;
  // CUDA engines: the CUDA tactic serving the layer, or null for a CPU fallback (the
  // kernel itself lives in the context's CUDA state, backends/cuda/cuda_context.cpp).
  const char* device_tactic = nullptr;
  std::vector<int> in, out;              // slot indices, -1 for an omitted value
  // A Reshape-like layer whose output shares its input's memory (ContextImpl::find_views):
  // nothing runs.
  bool view = false;
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  double total_ms = 0;
  int64_t runs = 0;
};

// Callback used while building: given a step with several tactics, returns the chosen
// one (the builder times them). Null outside of builds.
struct TacticChooser {
  virtual ~TacticChooser() = default;
  // Timing cache access for backends that time their own candidates (CUDA): the cached
  // time of `tactic` for the step's layer (-1: none), storing a measurement, and noting
  // the time of the tactic chosen for the layer.
  virtual double cached_ms(const Step& step, const std::string& tactic) = 0;
  virtual void store_ms(const Step& step, const std::string& tactic, double ms) = 0;
  virtual void chose(const Step& step, double ms) = 0;
  virtual const fast::Tactic* choose(const Step& step, const fast::LayerSpec& spec,
                                     const std::vector<const fast::Tactic*>& candidates,
                                     const std::vector<fast::TensorShape>& in_shapes,
                                     const std::vector<fast::TensorShape>& out_shapes) = 0;
};

struct ContextImpl {
  std::shared_ptr<const Engine> engine;
  const EngineImpl* e = nullptr;
  int profile = 0;
  std::map<std::string, Dims> input_dims;
  std::map<std::string, void*> bound;
  TacticChooser* chooser = nullptr;

  // State for the current input shapes (rebuilt by setup() when they change).
  bool dirty = true;
  std::unique_ptr<Graph> spec;           // the engine's graph specialized to the shapes
  std::vector<Slot> slots;
  std::unordered_map<const Value*, int> slot_of;
  std::vector<Step> steps;
  std::unique_ptr<std::byte[]> arena_storage;
  std::byte* arena = nullptr;
  size_t arena_capacity = 0;
  size_t activation_bytes = 0;
  size_t scratch_bytes = 0;
  bool profiling = false;
  // Debug hook (kiln compare --layerwise): called after each step with its node and its
  // output tensors (null for omitted outputs) while they are live; arena memory is reused
  // by later steps, so this is the only moment intermediates can be read.
  std::function<void(const Node&, const std::vector<Tensor*>&)> step_observer;

  // CUDA engines: the CUDA state (backends/cuda/cuda_context.cpp), type-erased so that
  // the runtime compiles without CUDA; kept across setups (handles, streams).
  std::shared_ptr<void> cuda;
  bool use_cuda_graphs = true;  // replay the whole enqueue as one CUDA graph when possible
  // Host mode: a CUDA context whose graph has a data-dependent shape at the current input
  // shapes (NonZero, NMS, ...) cannot plan device memory, so it runs every layer with the
  // CPU kernels, as a CPU engine does, in host memory; bound (device) buffers are copied
  // in before and out after (runtime/cuda_host_mode.cpp). Decided again at every setup.
  bool host_mode = false;
  std::string host_mode_reason;  // data_dependent_shape_reason() of the specialized graph

  Status setup();
  Status run_steps();
  // First and last step index using each slot (graph outputs and values captured by
  // subgraphs: the step count), and the arena buffers' lives with their slot indices.
  void plan_lives(std::vector<BufferLife>* lives, std::vector<int>* arena_slots) const;
  // Layers that only reinterpret the shape of a contiguous tensor (Reshape, Flatten,
  // Squeeze, Unsqueeze, Identity) between two activations the context owns: marks them
  // Step::view and returns, per slot, the slot whose memory it shares (the root of a chain)
  // or -1. A graph input or output may be bound to a caller's buffer at any time, so the
  // layers next to one keep their copy.
  std::vector<int> find_views();
  // The arena plan of the kArena slots (arena_slots: their indices, in the plan's order),
  // with each view at its root's offset and the root alive as long as any view of it.
  MemoryPlan plan_arena(const std::vector<int>& views, size_t align, std::vector<int>* arena_slots) const;
  Result<Dims> resolved_input_dims(const Value& input) const;
  Status bind_slot(Slot& s, void* data);
  // Host mode (runtime/cuda_host_mode.cpp): runs the CPU steps after copying bound inputs
  // from device memory, then copies the outputs to their bound device buffers; orders after
  // the work already queued on `stream` (null: the legacy default stream) and is complete
  // on return. Host tensors into the context's input buffers (run(), bench), and an output
  // (or any value) after a run: a view of the context's host memory.
  Status run_host_mode(void* stream);
  Status host_upload_inputs(const std::map<std::string, Tensor>& host);
  Result<Tensor> host_value(const std::string& name) const;
};

}  // namespace kiln
