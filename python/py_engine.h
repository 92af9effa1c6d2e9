// Python-side state of builds, engines and execution contexts.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "py_common.h"
#include "runtime/interpreter.h"

namespace kiln::pyapi {

// kiln.BuilderConfig: the options of `kiln build` (same names, underscores for dashes).
struct PyBuilderConfig {
  std::string device = "cpu";
  bool fp16 = false, bf16 = false, tf32 = false, int8 = false, fp8 = false;
  int threads = 0;
  size_t memory_limit_bytes = 0;
  std::string timing_cache;
  int opt_level = 2;
  bool time_tactics = true;
  // As --shapes / --min-shapes / --opt-shapes / --max-shapes; or explicit profiles.
  std::map<std::string, Dims> shapes, min_shapes, opt_shapes, max_shapes;
  std::vector<OptimizationProfile> profiles;
  py::object progress = py::none();  // callable(stage: str, fraction: float) or None
};

// Sets one option by its keyword name; TypeError for an unknown name, InvalidArgumentError
// for a bad value.
void set_option(PyBuilderConfig& c, const std::string& key, py::handle value);
// A copy of `config` (a BuilderConfig or None) with `options` applied on top.
PyBuilderConfig config_from(py::handle config, const py::dict& options);
// The C++ config; profiles composed from the shape options the way `kiln build` does.
Result<BuilderConfig> to_builder_config(const PyBuilderConfig& c);

// Where a model comes from: a path (str / os.PathLike) or serialized bytes (bytes-like,
// or an onnx.ModelProto); bytes resolve external data against base_dir.
struct ModelSource {
  std::string path;
  std::string bytes;
  bool is_bytes = false;
  std::string base_dir = ".";
  std::string label() const { return is_bytes ? std::string("<bytes>") : path; }
};
ModelSource model_source(py::handle model, const std::string& base_dir);

// Builds on a worker thread (GIL released, Ctrl-C cancels at the next build stage).
std::shared_ptr<Engine> build_engine(Logger& log, const ModelSource& src, const PyBuilderConfig& config);

// A CUDA run queued on a caller's stream (ExecutionContext.run with stream=): the DLPack
// capsules and objects of its tensors, kept until the event recorded after it completes.
struct PendingRun {
  std::shared_ptr<gpu::Event> done;
  std::shared_ptr<InputKeepAlive> keep;
};

// A queued run, as later runs on the same context see it: the context's memory serves one
// run at a time, so a run on another stream waits for it (on the GPU), and a run with host
// inputs (on the context's own stream) waits for it on the host.
struct QueuedRun {
  std::shared_ptr<gpu::Event> done;
  void* stream = nullptr;
};

struct PyContext {
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<ExecutionContext> ctx;
  std::mutex mu;  // a context runs one call at a time; the GIL is released while it runs
  std::vector<QueuedRun> queued;  // guarded by mu
  // The tensors of queued runs; only touched with the GIL held (pruned by each run; the
  // destructor waits for the rest).
  std::vector<PendingRun> pending;
  PyContext() = default;
  PyContext(const PyContext&) = delete;
  PyContext& operator=(const PyContext&) = delete;
  ~PyContext();
};

struct PyEngine {
  std::shared_ptr<Engine> e;
  std::mutex mu;
  std::shared_ptr<PyContext> default_ctx;  // for Engine.run
};

// The (name, value) pairs of `inputs`: a mapping, or one array for a one-input engine.
// None is an error unless allow_missing (then: no pairs).
std::vector<std::pair<std::string, py::object>> input_items(const Engine& e, py::handle inputs, bool allow_missing);
// Converts the inputs (as input_items) for `e`: host memory only.
TensorMap inputs_from_python(const Engine& e, py::handle inputs, InputKeepAlive& keep, bool allow_missing);

void register_config(py::module_& m);
void register_engine(py::module_& m);
void register_tools(py::module_& m);

}  // namespace kiln::pyapi
