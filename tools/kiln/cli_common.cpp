#include "cli_common.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>

#include "onnx/tensor_io.h"
#include "runtime/inputs.h"

namespace kiln::cli {

int fail(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return 1;
}

bool is_engine_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  if (!f.read(magic, sizeof(magic))) return false;
  return std::string(magic, sizeof(magic)) == "KILNPLAN";
}

std::string human_bytes(size_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  if (u == 0) os << bytes << " bytes";
  else os << std::fixed << std::setprecision(1) << v << " " << units[u];
  return os.str();
}

void add_build_flags(CLI::App* cmd, BuildFlags& f, bool with_shapes) {
  const std::string g = "Build";
  cmd->add_option("--device", f.device, "Target device: cpu or cuda (default cpu)")->group(g);
  if (with_shapes) {
    cmd->add_option("--shapes", f.shapes, "Fixed input shapes: NAME:1x3x224x224,...")->group(g);
  }
  cmd->add_option("--min-shapes", f.min_shapes, "Smallest shapes of dynamic inputs: NAME:DIMS,...")->group(g);
  cmd->add_option("--opt-shapes", f.opt_shapes, "Shapes to tune for: NAME:DIMS,...")->group(g);
  cmd->add_option("--max-shapes", f.max_shapes, "Largest shapes (memory is planned for them): NAME:DIMS,...")->group(g);
  cmd->add_option("--threads", f.threads, "CPU threads (default 0: all cores)")->group(g);
  cmd->add_option("--timing-cache", f.timing_cache, "Tactic timing cache file, read before and written after")->group(g);
  cmd->add_flag("--fp16", f.fp16, "Allow float16 layers")->group(g);
  cmd->add_flag("--bf16", f.bf16, "Allow bfloat16 layers")->group(g);
  cmd->add_flag("--tf32", f.tf32, "Allow TF32 math")->group(g);
  cmd->add_flag("--int8", f.int8, "Allow int8 layers")->group(g);
  cmd->add_option("-O,--opt-level", f.opt_level, "Optimization level 0 (none), 1 (cleanups), 2 (fusions; default)")
      ->group(g);
  cmd->add_option("--conv-layout", f.conv_layout,
                  "CUDA engines: layout of convolutions and pooling, auto (default: NCHW today), nchw or nhwc")
      ->group(g);
}

Result<BuilderConfig> make_build_config(const BuildFlags& f) {
  BuilderConfig c;
  if (f.device == "cpu") c.device = DeviceKind::kCPU;
  else if (f.device == "cuda") c.device = DeviceKind::kCUDA;
  else return invalid_argument("unknown device '", f.device, "': expected cpu or cuda");
  c.fp16 = f.fp16;
  c.bf16 = f.bf16;
  c.tf32 = f.tf32;
  c.int8 = f.int8;
  c.threads = f.threads;
  c.timing_cache_path = f.timing_cache;
  c.optimization_level = f.opt_level;
  if (f.conv_layout == "auto") c.conv_layout = ConvLayout::kAuto;
  else if (f.conv_layout == "nchw") c.conv_layout = ConvLayout::kNCHW;
  else if (f.conv_layout == "nhwc") c.conv_layout = ConvLayout::kNHWC;
  else return invalid_argument("unknown --conv-layout '", f.conv_layout, "': expected auto, nchw or nhwc");

  std::map<std::string, Dims> fixed, mins, opts, maxs;
  KILN_RETURN_IF_ERROR(parse_shape_list(f.shapes, &fixed));
  KILN_RETURN_IF_ERROR(parse_shape_list(f.min_shapes, &mins));
  KILN_RETURN_IF_ERROR(parse_shape_list(f.opt_shapes, &opts));
  KILN_RETURN_IF_ERROR(parse_shape_list(f.max_shapes, &maxs));
  OptimizationProfile p;
  for (const auto& [name, d] : fixed) p.inputs[name] = ShapeRange{d, d, d};
  std::set<std::string> ranged;
  for (const auto* m : {&mins, &opts, &maxs}) {
    for (const auto& [name, d] : *m) ranged.insert(name);
  }
  for (const std::string& name : ranged) {
    if (fixed.count(name)) {
      return invalid_argument("input '", name, "' is in --shapes and in --min/--opt/--max-shapes; give one or the other");
    }
    auto get = [&name](const std::map<std::string, Dims>& m) { auto it = m.find(name); return it == m.end() ? nullptr : &it->second; };
    const Dims* mn = get(mins);
    const Dims* op = get(opts);
    const Dims* mx = get(maxs);
    // Missing entries: opt defaults to max (else min); min and max default to opt.
    const Dims opt = op ? *op : mx ? *mx : *mn;
    p.inputs[name] = ShapeRange{mn ? *mn : opt, opt, mx ? *mx : opt};
  }
  if (!p.inputs.empty()) c.profiles.push_back(std::move(p));
  return c;
}

bool has_build_only_flags(const BuildFlags& f) {
  return !f.min_shapes.empty() || !f.opt_shapes.empty() || !f.max_shapes.empty() || !f.timing_cache.empty() || f.fp16 ||
         f.bf16 || f.tf32 || f.int8 || f.opt_level != 2 || f.device != "cpu" ||
         f.conv_layout != "auto";
}

namespace {
StderrLogger g_logger(LogSeverity::kWarning);
}  // namespace

Logger& cli_logger() { return g_logger; }
void set_verbose(bool verbose) { g_logger.set_severity(verbose ? LogSeverity::kVerbose : LogSeverity::kWarning); }

Result<std::shared_ptr<Engine>> build_engine(const std::string& model_path, BuilderConfig config) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty) {
    config.progress = [](const std::string& stage, double fraction) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(std::lround(fraction * kWidth));
      std::string bar(static_cast<size_t>(filled), '=');
      bar.resize(kWidth, ' ');
      std::fprintf(stderr, "\r\033[K[%s] %3d%%  %s", bar.c_str(), static_cast<int>(std::lround(fraction * 100)), stage.c_str());
      if (fraction >= 1.0) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  auto engine = Builder(cli_logger()).build_from_file(model_path, config);
  if (tty && !engine) std::fprintf(stderr, "\r\033[K");  // clear a half-drawn bar before the error
  return engine;
}

Result<std::shared_ptr<Engine>> load_or_build(const std::string& path, const BuildFlags& flags, bool* built_in_memory) {
  *built_in_memory = !is_engine_file(path);
  if (!*built_in_memory) return Engine::load(path);
  KILN_ASSIGN_OR_RETURN(BuilderConfig config, make_build_config(flags));
  return build_engine(path, std::move(config));
}

Result<std::map<std::string, Dims>> parse_input_shapes(const std::string& spec, const Graph& g) {
  std::map<std::string, Dims> shapes;
  KILN_RETURN_IF_ERROR(parse_shape_list(spec, &shapes));
  KILN_RETURN_IF_ERROR(check_shape_names(shapes, g, "--shapes"));
  return shapes;
}

Result<TensorMap> prepare_inputs(const Graph& g, const std::vector<std::string>& input_specs,
                                 const std::function<Result<Dims>(const Value&)>& shape_of, uint64_t seed) {
  TensorMap feeds;
  for (const std::string& spec : input_specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) return invalid_argument("bad --input '", spec, "': expected NAME=FILE");
    std::string name = spec.substr(0, eq);
    auto t = read_tensor_file(spec.substr(eq + 1));
    if (!t) return t.status().with_context(cat("input '", name, "': "));
    feeds[name] = std::move(t).value();
  }
  std::vector<std::string> generated;
  KILN_RETURN_IF_ERROR(add_random_inputs(g, feeds, shape_of, seed, &generated));
  for (const std::string& name : generated) {
    const Tensor& t = feeds.at(name);
    std::cout << "input " << name << ": random " << dtype_name(t.dtype()) << dims_str(t.dims()) << "\n";
  }
  return feeds;
}

void print_tensor_summary(const std::string& name, const Tensor& t) {
  std::cout << "  " << name << ": " << dtype_name(t.dtype()) << dims_str(t.dims());
  const int64_t n = t.is_string() ? 0 : t.size();
  if (n > 0) {
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nan = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v = t.get_double(i);
      if (std::isnan(v)) {
        ++nan;
        continue;
      }
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
    }
    std::cout << std::setprecision(6) << "  min " << mn << "  max " << mx << "  mean "
              << sum / static_cast<double>(n - nan == 0 ? 1 : n - nan);
    if (nan) std::cout << "  NaN " << nan;
  }
  std::cout << "\n";
}

std::string sanitize_name(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

std::string fused_ops_summary(const Engine& e) {
  // The op table's fused ops (its last section, from FusedConv on), and nodes a pass
  // created with no ONNX form (exported to the "kiln" domain and re-imported from it).
  std::map<std::string, int> count;
  for (const Node* n : engine_graph(e).nodes()) {
    if (n->op() >= Op::FusedConv || n->onnx_domain == "kiln") ++count[op_name(n->op())];
  }
  std::string s;
  for (const auto& [op, k] : count) s += cat(s.empty() ? "" : ", ", op, " x", k);
  return s.empty() ? "none" : s;
}

}  // namespace kiln::cli
