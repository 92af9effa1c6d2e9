// kiln build MODEL -o ENGINE: builds an engine, saves the plan and prints what the
// builder did.
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "commands.h"

namespace kiln::cli {

namespace {

// "float32 x6" style histogram of a per-layer field.
template <typename F>
std::string histogram(const std::vector<LayerInfo>& layers, F field) {
  std::map<std::string, int> count;
  for (const LayerInfo& l : layers) ++count[field(l)];
  std::string s;
  for (const auto& [k, n] : count) s += cat(s.empty() ? "" : ", ", k.empty() ? "-" : k, " x", n);
  return s;
}

}  // namespace

int cmd_build(const BuildArgs& o) {
  auto config = make_build_config(o.flags);
  if (!config) return fail(config.status());
  auto engine = build_engine(o.model, *config);
  if (!engine) return fail(engine.status());
  const Engine& e = **engine;
  if (Status s = e.save(o.output); !s) return fail(s);
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(o.output, ec);

  const BuildSummary& s = e.summary();
  std::string flags;
  for (const auto& [name, on] : {std::pair{"fp16", o.flags.fp16}, std::pair{"bf16", o.flags.bf16},
                                 std::pair{"tf32", o.flags.tf32}, std::pair{"int8", o.flags.int8}}) {
    if (on) flags += cat(flags.empty() ? "" : " ", name);
  }
  std::cout << "Built " << o.output << " from " << o.model << " in " << std::fixed << std::setprecision(2)
            << s.build_seconds << " s\n"
            << std::defaultfloat;
  std::cout << "  device      " << device_name(e.device()) << ", threads "
            << (o.flags.threads > 0 ? std::to_string(o.flags.threads) : std::string("all cores")) << ", opt level "
            << o.flags.opt_level << "\n";
  std::cout << "  layers      " << s.layers << " (" << s.nodes_imported << " nodes imported, " << s.fusions
            << " fusions)\n";
  std::cout << "  fused ops   " << fused_ops_summary(e) << "\n";
  std::cout << "  precision   " << histogram(e.layers(), [](const LayerInfo& l) { return l.precision; })
            << " (allowed: fp32" << (flags.empty() ? "" : " " + flags) << ")\n";
  std::cout << "  tactics     " << histogram(e.layers(), [](const LayerInfo& l) { return l.tactic; }) << " ("
            << s.tactics_timed << " timed, " << s.timing_cache_hits << " from the timing cache)\n";
  for (size_t i = 0; i < e.profiles().size(); ++i) {
    for (const auto& [name, r] : e.profiles()[i].inputs) {
      std::cout << "  profile " << i << "   " << name << ": min " << dims_str(r.min) << " opt " << dims_str(r.opt)
                << " max " << dims_str(r.max) << "\n";
    }
  }
  std::cout << "  memory      weights " << human_bytes(s.weight_bytes) << ", activations "
            << human_bytes(s.peak_activation_bytes) << " (at the max shapes)\n";
  std::cout << "  engine      " << o.output << ", " << human_bytes(ec ? 0 : file_size) << "\n";
  if (!o.flags.timing_cache.empty()) std::cout << "  timing cache " << o.flags.timing_cache << "\n";
  return 0;
}

}  // namespace kiln::cli
