// libFuzzer target: engine (plan) file bytes -> Engine::deserialize -> execution context
// -> one run. A damaged plan must get an error Status, never a crash (docs/plan_format.md).
//
// Each input is tried twice:
//   1. as given: exercises the container checks (magic, version, sizes, section table,
//      checksum), which reject nearly every mutation;
//   2. when it starts with the plan magic: with the header's file size and the trailer
//      checksum patched to match, so mutations of the metadata JSON, the graph protobuf and
//      the weight offsets reach the parsers behind the checksum.
//
//   fuzz_plan_loader tests/fuzz/corpus/plan -max_len=65536   (see docs/fuzzing.md)
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "builder/plan_file.h"
#include "fuzz_util.h"
#include "kiln/kiln.h"
#include "onnx_mutator.h"
#include "runtime/engine_impl.h"

namespace {

constexpr size_t kHeaderSize = 96;  // plan_file.cpp
constexpr size_t kTrailerSize = 8;
constexpr size_t kFileSizeOffset = 16;
constexpr size_t kWeightsAlign = 4096;

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// A plan split into its sections (the layout of plan_file.h), for the custom mutator.
struct Sections {
  std::string header, meta, graph, weights;
};

bool split_plan(const uint8_t* data, size_t size, Sections* s) {
  if (size < kHeaderSize + kTrailerSize || std::memcmp(data, "KILNPLAN", 8) != 0) return false;
  const uint64_t body_end = size - kTrailerSize;
  std::string* parts[] = {&s->meta, &s->graph, &s->weights};
  for (int k = 0; k < 3; ++k) {
    const uint64_t off = get_u64(data + 24 + 16 * k), len = get_u64(data + 32 + 16 * k);
    if (off < kHeaderSize || off > body_end || len > body_end - off) return false;
    parts[k]->assign(reinterpret_cast<const char*>(data + off), len);
  }
  s->header.assign(reinterpret_cast<const char*>(data), kHeaderSize);
  return true;
}

// Lays the sections out again (weights page aligned) with a matching checksum.
std::string join_plan(const Sections& s) {
  const uint64_t meta_off = kHeaderSize, graph_off = meta_off + s.meta.size();
  const uint64_t weights_off = (graph_off + s.graph.size() + kWeightsAlign - 1) / kWeightsAlign * kWeightsAlign;
  const uint64_t file_size = weights_off + s.weights.size() + kTrailerSize;
  std::string out(file_size, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, s.header.data(), kHeaderSize);
  put_u64(p + 16, file_size);
  const uint64_t table[] = {meta_off, s.meta.size(), graph_off, s.graph.size(), weights_off, s.weights.size()};
  for (int k = 0; k < 6; ++k) put_u64(p + 24 + 8 * k, table[k]);
  std::memcpy(p + meta_off, s.meta.data(), s.meta.size());
  std::memcpy(p + graph_off, s.graph.data(), s.graph.size());
  std::memcpy(p + weights_off, s.weights.data(), s.weights.size());
  put_u64(p + file_size - kTrailerSize, kiln::plan_checksum(reinterpret_cast<const std::byte*>(p), file_size - kTrailerSize));
  return out;
}

// Replaces one leaf (or edits one array/object) of the metadata JSON.
void mutate_json(nlohmann::json& j, kiln::fuzz::Rng& rng) {
  std::vector<nlohmann::json*> nodes;
  std::vector<nlohmann::json*> work = {&j};
  while (!work.empty()) {
    nlohmann::json* x = work.back();
    work.pop_back();
    nodes.push_back(x);
    if (x->is_structured()) {
      for (auto& child : *x) work.push_back(&child);
    }
  }
  nlohmann::json& x = *nodes[kiln::fuzz::pick(rng, nodes.size())];
  static const char* kStrings[] = {"", "cpu", "cuda", "x86_64", "float32", "reference", "image", "probs", "N"};
  switch (rng() % 6) {
    case 0: x = kiln::fuzz::interesting_int(rng); break;
    case 1: x = static_cast<double>(kiln::fuzz::interesting_float(rng)); break;
    case 2: x = kStrings[kiln::fuzz::pick(rng, std::size(kStrings))]; break;
    case 3:
      if (x.is_array() && !x.empty()) {
        x.erase(kiln::fuzz::pick(rng, x.size()));
      } else if (x.is_object() && !x.empty()) {
        auto it = x.begin();
        std::advance(it, static_cast<long>(kiln::fuzz::pick(rng, x.size())));
        x.erase(it);
      }
      break;
    case 4:
      if (x.is_array() && !x.empty()) x.push_back(x[kiln::fuzz::pick(rng, x.size())]);
      break;
    default: x = rng() % 2 ? nlohmann::json::array() : nlohmann::json(nullptr); break;
  }
}

// Random tensor for an engine input: floats in [-1, 1), small non-negative integers (they
// often index something), bools.
kiln::Tensor random_tensor(kiln::DataType dt, const kiln::Dims& dims, std::mt19937& rng) {
  kiln::Tensor t(dt, dims);
  for (int64_t i = 0; i < t.size(); ++i) {
    const double x = static_cast<double>(rng() % 2000) / 1000.0 - 1.0;
    switch (dt) {
      case kiln::DataType::kFloat32: t.data<float>()[i] = static_cast<float>(x); break;
      case kiln::DataType::kFloat64: t.data<double>()[i] = x; break;
      case kiln::DataType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(rng() % 4); break;
      case kiln::DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(rng() % 4); break;
      case kiln::DataType::kBool: t.data<bool>()[i] = (rng() & 1) != 0; break;
      default: break;  // other dtypes stay zero
    }
  }
  return t;
}

// Creates a context and runs the engine once if every value of its graph is small.
void maybe_run(const kiln::Engine& engine) {
  // Sizes are checked on a fresh copy of the graph whose shapes come from inference alone
  // (fuzz_util.h); engines with dynamic inputs load but do not run.
  auto fresh = kiln::import_plan_graph(engine.impl().plan, "engine");
  if (!fresh.is_ok() || !kiln::fuzz::reinfer_shapes(**fresh) || !kiln::fuzz::runnable(**fresh)) return;
  auto ctx = engine.create_execution_context();
  if (!ctx.is_ok()) return;
  std::mt19937 rng(1234);
  std::map<std::string, kiln::Tensor> feeds;
  // Shapes from the graph (runnable() proved them static and small), not from the
  // metadata, which only has to name the same inputs.
  for (const kiln::Value* v : (*fresh)->inputs()) {
    if (v->dtype == kiln::DataType::kString) return;
    kiln::Dims dims;
    for (const kiln::Dim& d : *v->shape) dims.push_back(d.value);
    feeds[v->name()] = random_tensor(v->dtype, dims, rng);
  }
  (void)(*ctx)->run(feeds);
}

void load_and_run(const uint8_t* data, size_t size) {
  auto engine = kiln::Engine::deserialize(data, size);
  if (!engine.is_ok()) return;
  maybe_run(**engine);
  // The loaded engine's own bytes must load again.
  const std::string again = (*engine)->serialize();
  if (!kiln::Engine::deserialize(again.data(), again.size()).is_ok()) __builtin_trap();
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Most mutations edit one section of a well-formed plan (the JSON as JSON, the graph as
// a ModelProto, any section as bytes) and re-frame it, so they pass the container checks;
// the rest are libFuzzer's own byte mutations of the whole file.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  kiln::fuzz::Rng rng(seed);
  Sections s;
  if (rng() % 4 == 0 || !split_plan(data, size, &s)) return LLVMFuzzerMutate(data, size, max_size);
  switch (rng() % 4) {
    case 0: {
      auto j = nlohmann::json::parse(s.meta, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
      mutate_json(j, rng);
      s.meta = j.dump();
      break;
    }
    case 1: {
      onnx::ModelProto m;
      if (!m.ParseFromString(s.graph) || !m.has_graph()) return LLVMFuzzerMutate(data, size, max_size);
      kiln::fuzz::mutate_model(&m, rng);
      if (!m.SerializeToString(&s.graph)) return LLVMFuzzerMutate(data, size, max_size);
      break;
    }
    default: {
      std::string& part = rng() % 3 == 0 ? s.weights : rng() % 2 ? s.graph : s.meta;
      const size_t cap = part.size() + 64;
      part.resize(cap);
      part.resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(part.data()), cap - 64, cap));
      break;
    }
  }
  const std::string out = join_plan(s);
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  load_and_run(data, size);
  if (size < kHeaderSize + kTrailerSize || std::memcmp(data, "KILNPLAN", 8) != 0) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  put_u64(fixed.data() + kFileSizeOffset, size);
  put_u64(fixed.data() + size - kTrailerSize,
          kiln::plan_checksum(reinterpret_cast<const std::byte*>(fixed.data()), size - kTrailerSize));
  if (std::memcmp(fixed.data(), data, size) != 0) load_and_run(fixed.data(), fixed.size());
  return 0;
}
