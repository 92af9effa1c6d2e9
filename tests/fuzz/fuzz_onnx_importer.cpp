// libFuzzer target: ONNX ModelProto bytes -> importer -> optimizer -> reference
// interpreter, and the ONNX exporter round trip. Every stage must answer a bad model with
// an error Status; a crash, sanitizer report, abort or uncaught exception is a bug.
//
//   fuzz_onnx_importer tests/fuzz/corpus/onnx -max_len=65536   (see docs/fuzzing.md)
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "onnx_mutator.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "passes/pass.h"

namespace {

// External data resolves against an empty private folder: a fuzzed location must never
// read the files of whatever folder the fuzzer runs in.
std::string g_base_dir;

// Runs the graph on random inputs when it is small enough (fuzz_util.h).
void maybe_run(kiln::Graph& g) {
  if (!kiln::fuzz::pin_input_shapes(g) || !kiln::fuzz::reinfer_shapes(g) || !kiln::fuzz::runnable(g)) return;
  kiln::TensorMap feeds;
  if (!kiln::fuzz::make_inputs(g, &feeds)) return;
  (void)kiln::Interpreter(g).run(feeds);
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Half of the mutations edit the parsed model (onnx_mutator.h), the rest are libFuzzer's
// byte-level ones, which also reach the protobuf parser and raw tensor data.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  kiln::fuzz::Rng rng(seed);
  onnx::ModelProto m;
  if (rng() % 2 == 0 || !m.ParseFromArray(data, static_cast<int>(size)) || !m.has_graph()) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  for (size_t k = 0, edits = 1 + rng() % 3; k < edits; ++k) kiln::fuzz::mutate_model(&m, rng);
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char tmpl[] = "/tmp/kiln-fuzz-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  g_base_dir = dir ? dir : "/nonexistent-kiln-fuzz-dir";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);

  // 1. Import, and run the graph as imported.
  auto model = kiln::import_onnx_bytes(bytes, g_base_dir, "fuzz");
  if (!model.is_ok() || !kiln::fuzz::constants_small(*model->graph)) return 0;
  maybe_run(*model->graph);

  // 2. A fresh import through the optimizer (it rewrites in place; the verifier runs
  // after every pass).
  auto fresh = kiln::import_onnx_bytes(bytes, g_base_dir, "fuzz");
  if (!fresh.is_ok()) __builtin_trap();  // the same bytes imported a moment ago
  kiln::Graph& g = *fresh->graph;
  if (!kiln::optimize_graph(g).is_ok()) return 0;

  // 3. Export and re-import the optimized graph (what `kiln inspect --export` and plan
  // files do), then run the optimized graph.
  if (auto exported = kiln::export_onnx_bytes(g); exported.is_ok()) {
    (void)kiln::import_onnx_bytes(*exported, g_base_dir, "fuzz (re-imported)");
  }
  maybe_run(g);
  return 0;
}
