// kiln's public C++ API: build an engine from an ONNX model once, save it as a plan
// file, load it anywhere and run it many times (docs/api.md has a complete example).
//
//   kiln::BuilderConfig config;                       // CPU, fp32, optimization level 2
//   auto engine = kiln::Builder().build_from_file("model.onnx", config);
//   engine.value()->save("model.kiln");
//   auto ctx = engine.value()->create_execution_context();
//   auto outputs = ctx.value()->run({{"input", tensor}});
//
// Errors are values: every call that can fail returns a Status or a Result<T> whose
// message names the file, node, op, input and reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

// ---- logging ----
enum class LogSeverity { kError = 0, kWarning = 1, kInfo = 2, kVerbose = 3 };

class Logger {
 public:
  virtual ~Logger() = default;
  virtual void log(LogSeverity severity, const std::string& message) = 0;
};

// Writes warnings and errors to stderr (more with set_severity).
class StderrLogger : public Logger {
 public:
  explicit StderrLogger(LogSeverity max = LogSeverity::kWarning) : max_(max) {}
  void set_severity(LogSeverity max) { max_ = max; }
  void log(LogSeverity severity, const std::string& message) override;

 private:
  LogSeverity max_;
};
Logger& default_logger();

// ---- build configuration ----
enum class DeviceKind { kCPU = 0, kCUDA = 1 };
const char* device_name(DeviceKind d);  // "cpu", "cuda"

// The range of shapes one input may take at run time. min <= opt <= max per dim; the
// builder tunes tactics at opt and plans memory for max.
struct ShapeRange {
  Dims min, opt, max;
};
// One optimization profile: a ShapeRange for each input with a dynamic dim. Inputs with
// static dims need no entry.
struct OptimizationProfile {
  std::map<std::string, ShapeRange> inputs;
  // A profile where every listed input has one fixed shape.
  static OptimizationProfile fixed(const std::map<std::string, Dims>& shapes);
};

// Layout of 2-D convolutions and pooling in CUDA engines. kNHWC runs them channels-last
// (tensor-core friendly for FP16/BF16), with transposes only where NHWC and NCHW layers
// meet (passes/channels_last.cpp). kAuto picks NHWC for FP16/BF16 engines (measured on an
// H200: ResNet-50 FP16 batch 1 0.86 -> 0.32 ms, batch 256 75.6 -> 10.3 ms) and NCHW for
// FP32/TF32 ones. CPU engines ignore it.
enum class ConvLayout { kAuto = 0, kNCHW = 1, kNHWC = 2 };

struct BuilderConfig {
  DeviceKind device = DeviceKind::kCPU;
  // Precision flags: which lower precisions the builder may use where they are safe.
  // FP32 is always allowed. The CPU backend runs FP32 today; the flags are recorded in
  // the plan and used by the backends that implement them.
  bool fp16 = false;
  bool bf16 = false;
  bool tf32 = false;
  bool int8 = false;
  bool fp8 = false;
  // Several profiles per engine; none means: every dynamic dim is fixed to 1.
  std::vector<OptimizationProfile> profiles;
  int threads = 0;                  // CPU threads; 0: all cores
  size_t memory_limit_bytes = 0;    // activation arena limit; 0: unlimited
  std::string timing_cache_path;    // read before tactic timing, written after; "" = none
  int optimization_level = 2;       // 0: none, 1: basic cleanups, 2: fusions
  bool time_tactics = true;         // false: take each layer's first supported tactic
  ConvLayout conv_layout = ConvLayout::kAuto;  // CUDA engines (see ConvLayout)
  // Called with a stage name ("import", "optimize", "tactics", "plan") and a fraction
  // of the whole build done in [0, 1].
  std::function<void(const std::string& stage, double fraction)> progress;
};

// ---- engine ----
struct TensorDesc {
  std::string name;
  DataType dtype = DataType::kUndefined;
  Dims dims;                          // -1 for a dynamic dim
  std::vector<std::string> dim_names; // symbolic names ("batch"), "" for static dims
};

// What the builder did, for `kiln build` / `kiln inspect ENGINE`.
struct LayerInfo {
  std::string name;      // node name (may be empty in the model)
  std::string output;    // name of its first output: identifies the layer
  std::string op;        // "FusedConv", "Attention", ...
  std::string tactic;    // kernel chosen: "onednn_conv", "kiln_softmax", "reference", ...
  std::string precision; // "float32", ...
  double time_ms = -1;   // timed cost of the chosen tactic at the opt shape; -1: not timed
};
struct BuildSummary {
  size_t nodes_imported = 0;
  size_t layers = 0;
  int fusions = 0;                 // rewrites done by the fusion passes
  size_t weight_bytes = 0;
  size_t peak_activation_bytes = 0; // memory plan at profile 0's max shapes
  // Build-time statistics, not stored in the plan (a plan depends only on the model,
  // the config and the timing cache): zero for a loaded engine.
  double build_seconds = 0;
  int tactics_timed = 0;
  int timing_cache_hits = 0;
};

class ExecutionContext;
struct EngineImpl;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  ~Engine();
  // Loads a plan file, validating all of it first (magic, version, checksum, target).
  static Result<std::shared_ptr<Engine>> load(const std::string& path);
  static Result<std::shared_ptr<Engine>> deserialize(const void* data, size_t size);
  Status save(const std::string& path) const;
  std::string serialize() const;

  const std::vector<TensorDesc>& inputs() const;
  const std::vector<TensorDesc>& outputs() const;
  const std::vector<OptimizationProfile>& profiles() const;
  DeviceKind device() const;
  const std::vector<LayerInfo>& layers() const;
  const BuildSummary& summary() const;
  // Human-readable description: target, inputs/outputs, layers with tactics, memory.
  std::string describe() const;

  Result<std::unique_ptr<ExecutionContext>> create_execution_context(int profile = 0) const;

  // Internal.
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  const EngineImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<EngineImpl> impl_;
};

class Builder {
 public:
  explicit Builder(Logger& logger = default_logger()) : logger_(logger) {}
  Result<std::shared_ptr<Engine>> build_from_file(const std::string& onnx_path, const BuilderConfig& config);
  Result<std::shared_ptr<Engine>> build_from_memory(const std::string& onnx_bytes, const BuilderConfig& config,
                                                    const std::string& base_dir = ".");

 private:
  Logger& logger_;
};

// ---- execution ----
struct ContextImpl;

// Runs one engine. Lifecycle (no hidden allocation): set the input shapes (setup plans
// memory and prepares kernels for those shapes), bind buffers, execute. Executing again
// with the same shapes allocates nothing.
class ExecutionContext {
 public:
  ~ExecutionContext();
  // Sets a dynamic input's shape; it must lie within the context's profile.
  Status set_input_shape(const std::string& name, const Dims& dims);
  // Shape of any input or output for the current input shapes (-1 where it depends on
  // data and is known only after execute).
  Result<Dims> tensor_shape(const std::string& name);
  // Binds a caller-owned buffer (host memory for CPU engines) to an input or output.
  // An unbound output is written to memory the context owns (see output()).
  Status set_tensor_address(const std::string& name, void* data);
  // Forgets a buffer bound with set_tensor_address: the context writes that output to (or
  // expects that input in) its own memory again. Memory is planned again on the next run.
  Status unbind_tensor(const std::string& name);
  // Runs the engine on the bound buffers and waits for it.
  Status execute();
  // Starts the engine on `stream` (a cudaStream_t for CUDA engines, ignored on the CPU,
  // where it runs before returning). A CUDA context whose graph has a data-dependent shape
  // runs on the CPU (host mode, docs/cuda.md): it waits for the work already on `stream`
  // and returns with the outputs in their bound buffers.
  Status enqueue(void* stream);
  // An output after execute: a view of the bound buffer or the context's memory.
  Result<Tensor> output(const std::string& name) const;

  // Convenience: sets shapes from the tensors, binds them, executes and returns copies
  // of the outputs in the engine's output order.
  Result<std::map<std::string, Tensor>> run(const std::map<std::string, Tensor>& inputs);

  // Per-layer profiling (kiln bench --profile): accumulated milliseconds per layer.
  void set_profiling(bool on);
  std::vector<std::pair<std::string, double>> layer_times_ms() const;
  // Arena bytes of the current memory plan.
  size_t activation_bytes() const;

  // Internal.
  explicit ExecutionContext(std::unique_ptr<ContextImpl> impl);
  ContextImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace kiln
