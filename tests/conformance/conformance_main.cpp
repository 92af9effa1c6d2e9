// Runs ONNX backend test cases (model.onnx + test_data_set_*/{input,output}_*.pb) through
// the importer and the reference backend. Each case runs in a forked child so a crash
// is reported as a failure of that case instead of ending the run.
//
//   kiln_conformance [--baseline FILE] [--filter SUBSTR] [--verbose] [--optimize] [--roundtrip] LABEL=DIR ...
//
// --optimize runs every model through the graph optimizer first: the optimized graph
// must compute the same outputs, so the pass counts must not drop.
//
// --engine cuda builds every case into a CUDA engine (FP32, optimization level 2, the
// case's input shapes) and runs it through an execution context, in this process (one
// CUDA context for all cases; --isolate forks per case as the reference runs do). Cases
// whose inputs are not plain tensors are skipped. It also counts the cases whose every
// layer ran on a CUDA kernel: a failure among those is a CUDA backend bug.
//
// Prints "N passed, N failed, N skipped" per folder and the failures grouped by op.
// Exits non-zero when a folder passes fewer cases than its baseline.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/tensor_io.h"
#include "passes/pass.h"
#include "kiln/kiln.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"
#include "runtime/interpreter.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

enum class Outcome { kPass = 0, kFail = 1, kSkip = 2 };

struct CaseResult {
  Outcome outcome;
  std::string group;   // op the case is filed under
  std::string reason;
  bool all_on_device = false;  // --engine cuda: every layer ran on a CUDA kernel
};

// Elementwise comparison with ONNX backend-test tolerances: rtol 1e-3, atol 1e-7 for
// floats (NaN must match NaN), exact equality otherwise. bfloat16 outputs may also be off by
// one unit in the last place: its 8-bit significand's half-ulp (up to 2^-8 relative) is
// above rtol, so rtol alone would demand the expected rounding bit for bit, which a kernel
// that accumulates in another order (a GPU's tensor cores) cannot give. rtol 1e-3 already
// allows one float16 ulp (2^-10 relative at most).
Status compare(const Tensor& got, const Tensor& want, const std::string& name) {
  if (got.kind() != want.kind()) {
    return invalid_argument("output '", name, "': got ", got.describe(), ", expected ", want.describe());
  }
  if (want.is_none()) return Status::ok();
  if (want.is_sequence()) {
    if (got.items().size() != want.items().size()) {
      return invalid_argument("output '", name, "': sequence of ", got.items().size(), " items, expected ", want.items().size());
    }
    for (size_t i = 0; i < want.items().size(); ++i) {
      KILN_RETURN_IF_ERROR(compare(got.items()[i], want.items()[i], cat(name, "[", i, "]")));
    }
    return Status::ok();
  }
  if (got.dtype() != want.dtype()) {
    return invalid_argument("output '", name, "': dtype ", dtype_name(got.dtype()), ", expected ", dtype_name(want.dtype()));
  }
  if (got.dims() != want.dims()) {
    return invalid_argument("output '", name, "': shape ", dims_str(got.dims()), ", expected ", dims_str(want.dims()));
  }
  if (want.is_string()) {
    for (int64_t i = 0; i < got.size(); ++i) {
      if (got.data<std::string>()[i] != want.data<std::string>()[i]) {
        return invalid_argument("output '", name, "'[", i, "] = \"", got.data<std::string>()[i], "\", expected \"",
                                want.data<std::string>()[i], "\"");
      }
    }
    return Status::ok();
  }
  const double rtol = 1e-3, atol = 1e-7;
  for (int64_t i = 0; i < got.size(); ++i) {
    if (is_float(got.dtype())) {
      double a = got.get_double(i), b = want.get_double(i);
      if (std::isnan(b) || std::isnan(a)) {
        if (std::isnan(a) && std::isnan(b)) continue;
        return invalid_argument("output '", name, "'[", i, "] = ", a, ", expected ", b);
      }
      if (std::isinf(b) || std::isinf(a)) {
        if (a == b) continue;
        return invalid_argument("output '", name, "'[", i, "] = ", a, ", expected ", b);
      }
      double tol = atol + rtol * std::fabs(b);
      if (got.dtype() == DataType::kBFloat16 && b != 0) tol = std::max(tol, std::ldexp(1.0, std::ilogb(b) - 7));
      if (std::fabs(a - b) > tol) {
        return invalid_argument("output '", name, "'[", i, "] = ", a, ", expected ", b, " (|diff| ", std::fabs(a - b), ")");
      }
    } else if (std::memcmp(static_cast<const char*>(got.raw()) + i * static_cast<int64_t>(dtype_size(got.dtype())),
                           static_cast<const char*>(want.raw()) + i * static_cast<int64_t>(dtype_size(want.dtype())),
                           dtype_size(got.dtype())) != 0) {
      return invalid_argument("output '", name, "'[", i, "] = ", got.get_int(i), ", expected ", want.get_int(i));
    }
  }
  return Status::ok();
}

// ONNX 1.12's test data stores bfloat16 tensors with data_type UINT16; read them as the
// bfloat16 the model declares.
Tensor as_declared(Tensor t, DataType declared) {
  if (declared == DataType::kBFloat16 && t.dtype() == DataType::kUInt16 && !t.is_sequence()) {
    return Tensor::wrap(DataType::kBFloat16, t.dims(), t.raw()).clone();
  }
  return t;
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) out.push_back(e.path());
  }
  // input_10 after input_9: sort by the number after the prefix.
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) { return std::atoi(p.filename().string().c_str() + prefix.size()); };
    return num(a) < num(b);
  });
  return out;
}

// The op a case is filed under: the failing node's op if known, else the model's ops.
std::string group_of(const std::string& message, const std::set<std::string>& ops) {
  size_t p = message.find("' (");
  if (p != std::string::npos) {
    size_t e = message.find(')', p);
    if (e != std::string::npos) return message.substr(p + 3, e - p - 3);
  }
  if (ops.size() == 1) return *ops.begin();
  std::string g;
  for (const auto& o : ops) g += (g.empty() ? "" : "+") + o;
  return g.size() > 60 ? g.substr(0, 57) + "..." : g;
}

bool g_optimize = false;   // --optimize: run each model through the optimizer first
bool g_roundtrip = false;  // --roundtrip: export the graph to ONNX and re-import it before running
bool g_cuda = false;       // --engine cuda
bool g_isolate = true;

// Builds the case into a CUDA engine for the feeds' shapes and runs it.
Result<std::vector<Tensor>> run_cuda_engine(const fs::path& model_path, const Graph& g, const TensorMap& feeds,
                                            bool* all_on_device) {
  std::ifstream f(model_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  BuilderConfig c;
  c.device = DeviceKind::kCUDA;
  std::map<std::string, Dims> shapes;
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, t] : feeds) {
    shapes[name] = t.dims();
    inputs[name] = t;
  }
  c.profiles.push_back(OptimizationProfile::fixed(shapes));
  c.time_tactics = false;
  KILN_ASSIGN_OR_RETURN(auto engine, Builder().build_from_memory(bytes, c, model_path.parent_path().string()));
  KILN_ASSIGN_OR_RETURN(auto ctx, engine->create_execution_context());
  KILN_ASSIGN_OR_RETURN(auto outs, ctx->run(inputs));
  *all_on_device = cuda_fallback_layers(ctx->impl()) == 0;
  std::vector<Tensor> r;
  for (const Value* o : g.outputs()) {
    auto it = outs.find(o->name());
    if (it == outs.end()) return internal_error("engine did not return output '", o->name(), "'");
    r.push_back(it->second);
  }
  return r;
}

CaseResult run_case(const fs::path& dir) {
  fs::path model_path = dir / "model.onnx";
  if (!fs::exists(model_path)) return {Outcome::kSkip, "-", "no model.onnx"};
  std::set<std::string> ops;
  {
    // Training-only cases (gradient ops from the preview.training domain) are out of scope.
    std::ifstream f(model_path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.find("ai.onnx.preview.training") != std::string::npos) return {Outcome::kSkip, "training", "training op"};
  }
  auto model = import_onnx_file(model_path.string());
  if (!model) {
    std::string msg = model.status().message();
    std::string group = "import";
    size_t p = msg.find(": op ");
    if (p != std::string::npos) group = msg.substr(p + 5, msg.find(' ', p + 5) - p - 5);
    return {Outcome::kFail, group, msg};
  }
  for (Node* n : model->graph->nodes()) ops.insert(n->onnx_op_type);
  if (g_optimize) {
    auto reports = optimize_graph(*model->graph);
    if (!reports) return {Outcome::kFail, "optimizer", reports.status().message()};
  }
  if (g_roundtrip) {
    auto bytes = export_onnx_bytes(*model->graph);
    if (!bytes) return {Outcome::kFail, "export", bytes.status().message()};
    auto again = import_onnx_bytes(*bytes, dir.string(), "exported model");
    if (!again) return {Outcome::kFail, "export", again.status().message()};
    model = std::move(again);
  }
  const Graph& g = *model->graph;
  auto sets = sorted_files(dir, "test_data_set_");
  if (sets.empty()) return {Outcome::kSkip, group_of("", ops), "no test data"};
  for (const auto& set : sets) {
    auto in_files = sorted_files(set, "input_");
    auto out_files = sorted_files(set, "output_");
    if (in_files.size() > g.inputs().size()) {
      return {Outcome::kFail, group_of("", ops), cat("case has ", in_files.size(), " inputs, model has ", g.inputs().size())};
    }
    TensorMap feeds;
    for (size_t i = 0; i < in_files.size(); ++i) {
      const Value* in = g.inputs()[i];
      auto t = read_value_pb(in_files[i].string(), in->is_sequence, in->is_optional);
      if (!t) return {Outcome::kFail, group_of("", ops), t.status().message()};
      feeds[g.inputs()[i]->name()] = as_declared(std::move(t).value(), in->dtype);
    }
    Result<std::vector<Tensor>> outs = internal_error("not run");
    bool on_device = false;
    if (g_cuda) {
      for (const Value* in : g.inputs()) {
        if (in->is_sequence || in->is_optional || in->dtype == DataType::kString) {
          return {Outcome::kSkip, group_of("", ops), "engine inputs must be plain numeric tensors"};
        }
      }
      outs = run_cuda_engine(model_path, g, feeds, &on_device);
    } else {
      outs = Interpreter(g).run(feeds);
    }
    if (!outs) return {Outcome::kFail, group_of(outs.status().message(), ops), outs.status().message()};
    if (out_files.size() != outs->size()) {
      return {Outcome::kFail, group_of("", ops), cat("model produced ", outs->size(), " outputs, expected ", out_files.size())};
    }
    for (size_t i = 0; i < out_files.size(); ++i) {
      const Value* out = g.outputs()[i];
      auto want = read_value_pb(out_files[i].string(), out->is_sequence, out->is_optional);
      if (!want) return {Outcome::kFail, group_of("", ops), want.status().message()};
      Status s = compare((*outs)[i], as_declared(std::move(want).value(), out->dtype), g.outputs()[i]->name());
      if (!s) return {Outcome::kFail, group_of("", ops), s.message(), on_device};
    }
    if (g_cuda && !on_device) return {Outcome::kPass, group_of("", ops), "", false};
  }
  return {Outcome::kPass, group_of("", ops), "", g_cuda};
}

// Runs a case in a child process with a time limit; the result comes back through a pipe.
CaseResult run_case_isolated(const fs::path& dir, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return run_case(dir);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(timeout_s));
    CaseResult r = run_case(dir);
    std::string msg = cat(static_cast<int>(r.outcome), "\n", r.all_on_device ? 1 : 0, "\n", r.group, "\n", r.reason);
    ssize_t w = write(fds[1], msg.data(), msg.size());
    (void)w;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string data;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) data.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (data.empty()) {
    std::string why = WIFSIGNALED(status) ? (WTERMSIG(status) == SIGALRM ? "timed out" : cat("crashed (signal ", WTERMSIG(status), ")"))
                                          : "exited without a result";
    return {Outcome::kFail, "crash", why};
  }
  std::istringstream is(data);
  std::string o, dev, group, reason;
  std::getline(is, o);
  std::getline(is, dev);
  std::getline(is, group);
  std::getline(is, reason, '\0');
  return {static_cast<Outcome>(std::atoi(o.c_str())), group, reason, dev == "1"};
}

}  // namespace

int main(int argc, char** argv) {
  std::string baseline_path, filter;
  bool verbose = false;
  std::vector<std::pair<std::string, std::string>> suites;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--baseline" && i + 1 < argc) baseline_path = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--verbose") verbose = true;
    else if (a == "--optimize") g_optimize = true;
    else if (a == "--roundtrip") g_roundtrip = true;
    else if (a == "--engine" && i + 1 < argc) {
      std::string d = argv[++i];
      if (d != "cuda") { std::cerr << "--engine: only cuda is supported\n"; return 2; }
      g_cuda = true;
      g_isolate = false;
    }
    else if (a == "--isolate") g_isolate = true;
    else if (a.find('=') != std::string::npos) suites.emplace_back(a.substr(0, a.find('=')), a.substr(a.find('=') + 1));
    else {
      std::cerr << "usage: kiln_conformance [--baseline FILE] [--filter SUBSTR] [--verbose] LABEL=DIR ...\n";
      return 2;
    }
  }
  if (g_cuda) {
    if (Status s = cuda_device_status(); !s.is_ok()) {
      std::cout << "conformance --engine cuda: skipped: " << s.message() << "\n";
      return 77;  // ctest SKIP_RETURN_CODE: reported as skipped, not passed
    }
    // One warning per case about CPU fallback layers would drown the report.
    if (auto* l = dynamic_cast<StderrLogger*>(&default_logger())) l->set_severity(LogSeverity::kError);
  }
  std::map<std::string, int> baseline;
  if (!baseline_path.empty()) {
    std::ifstream f(baseline_path);
    if (!f) { std::cerr << "cannot read baseline " << baseline_path << "\n"; return 2; }
    std::string label;
    int n;
    while (f >> label) {
      if (label[0] == '#') { std::getline(f, label); continue; }
      if (f >> n) baseline[label] = n;
    }
  }
  bool regressed = false;
  int total_pass = 0, total_fail = 0, total_skip = 0;
  for (const auto& [label, dir] : suites) {
    if (!fs::is_directory(dir)) {
      std::cerr << label << ": folder '" << dir << "' does not exist\n";
      return 2;
    }
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_directory() && e.path().filename().string().find(filter) != std::string::npos) cases.push_back(e.path());
    }
    std::sort(cases.begin(), cases.end());
    int pass = 0, fail = 0, skip = 0, dev_pass = 0, dev_fail = 0;
    std::map<std::string, std::vector<std::string>> failures;
    for (const auto& c : cases) {
      CaseResult r = g_isolate ? run_case_isolated(c, 120) : run_case(c);
      if (r.all_on_device) (r.outcome == Outcome::kPass ? dev_pass : dev_fail) += 1;
      std::string name = c.filename().string();
      if (r.outcome == Outcome::kPass) ++pass;
      else if (r.outcome == Outcome::kSkip) ++skip;
      else {
        ++fail;
        std::string reason = r.reason.substr(0, 300);
        std::replace(reason.begin(), reason.end(), '\n', ' ');
        failures[r.group].push_back((r.all_on_device ? "[all layers on CUDA] " : "") + name + ": " + reason);
      }
      if (verbose) std::cout << (r.outcome == Outcome::kPass ? "PASS " : r.outcome == Outcome::kSkip ? "SKIP " : "FAIL ") << label << "/" << name << (r.reason.empty() ? "" : "  " + r.reason.substr(0, 300)) << "\n";
    }
    std::cout << "\n== " << label << " (" << dir << ")\n";
    std::cout << "Failures by op:\n";
    for (const auto& [group, list] : failures) {
      std::cout << "  " << group << " (" << list.size() << ")\n";
      for (const auto& l : list) std::cout << "    " << l << "\n";
    }
    int run = pass + fail;
    std::cout << label << ": " << pass << " passed, " << fail << " failed, " << skip << " skipped ("
              << (run ? 100.0 * pass / run : 0.0) << "% of run cases)\n";
    if (g_cuda) {
      std::cout << label << ": cases with every layer on a CUDA kernel: " << dev_pass << " passed, " << dev_fail
                << " failed\n";
      // A case whose every layer ran on a CUDA kernel and failed is a CUDA backend bug.
      if (dev_fail > 0) regressed = true;
    }
    auto b = baseline.find(label);
    if (b != baseline.end() && pass < b->second) {
      std::cout << label << ": REGRESSION: " << pass << " passed is below the baseline of " << b->second << "\n";
      regressed = true;
    } else if (b != baseline.end() && pass > b->second) {
      std::cout << label << ": " << pass << " passed is above the baseline of " << b->second << "; raise it in " << baseline_path << "\n";
    }
    total_pass += pass;
    total_fail += fail;
    total_skip += skip;
  }
  std::cout << "\nconformance: " << total_pass << " passed, " << total_fail << " failed, " << total_skip << " skipped\n";
  return regressed ? 1 : 0;
}
