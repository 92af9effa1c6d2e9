// End-to-end tests of the engine commands of the kiln CLI: build, inspect ENGINE,
// run ENGINE, bench, compare, and their errors on bad files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model_builder.h"
#include "onnx/tensor_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int code;
  std::string output;
};

CmdResult run_cli(const std::string& args) {
  std::string cmd = std::string(KILN_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

const std::string kSample = std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx";

// A different classifier with sample_cnn's interface (image[N,3,32,32] -> probs[N,10]) and
// some of its value names (g, f, logits): an engine built from it is the wrong engine.
std::string write_wrong_model(const fs::path& dir) {
  auto m = testing::make_model();
  testing::add_input(m, "image", onnx::TensorProto::FLOAT, {"N", "3", "32", "32"});
  std::vector<float> w(30), b(10);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i)));
  testing::add_initializer_f32(m, "fc.w", {3, 10}, w);
  testing::add_initializer_f32(m, "fc.b", {10}, b);
  testing::add_node(m, "GlobalAveragePool", {"image"}, {"g"}, "gap");
  testing::add_node(m, "Flatten", {"g"}, {"f"}, "flatten");
  testing::add_node(m, "Gemm", {"f", "fc.w", "fc.b"}, {"logits"}, "fc");
  testing::add_node(m, "Softmax", {"logits"}, {"probs"}, "softmax");
  testing::add_output(m, "probs", onnx::TensorProto::FLOAT, {"N", "10"});
  const std::string path = (dir / "wrong.onnx").string();
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

class CliEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_cli_engine_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(CliEngine, BuildInspectRunBenchCompare) {
  const std::string engine = path("sample.kiln");
  auto b = run_cli("build " + kSample + " -o " + engine);
  ASSERT_EQ(b.code, 0) << b.output;
  for (const char* key : {"layers", "fusions", "fused ops", "precision", "memory", " s\n"}) {
    EXPECT_TRUE(contains(b.output, key)) << key << "\n" << b.output;
  }
  std::ifstream f(engine, std::ios::binary);
  std::string magic(8, '\0');
  ASSERT_TRUE(f.read(magic.data(), 8));
  EXPECT_EQ(magic, "KILNPLAN");

  auto in = run_cli("inspect " + engine);
  ASSERT_EQ(in.code, 0) << in.output;
  for (const char* key : {"Engine: ", "Fused ops: FusedConv", "layers:", "input  image: float32[1,3,32,32]",
                          "output probs: float32[1,10]", "tactics:", "float32"}) {
    EXPECT_TRUE(contains(in.output, key)) << key << "\n" << in.output;
  }

  // run ENGINE matches run MODEL on the same (seeded random) input.
  fs::create_directories(dir_ / "e");
  fs::create_directories(dir_ / "m");
  auto re = run_cli("run " + engine + " --seed 5 -o " + path("e"));
  ASSERT_EQ(re.code, 0) << re.output;
  EXPECT_TRUE(contains(re.output, "probs: float32[1,10]")) << re.output;
  EXPECT_TRUE(contains(re.output, "(engine, cpu")) << re.output;
  auto rm = run_cli("run " + kSample + " --seed 5 -o " + path("m"));
  ASSERT_EQ(rm.code, 0) << rm.output;
  auto te = read_npy(path("e/probs.npy"));
  auto tm = read_npy(path("m/probs.npy"));
  ASSERT_TRUE(te.is_ok() && tm.is_ok());
  ASSERT_EQ(te->dims(), tm->dims());
  double sum = 0;
  for (int64_t i = 0; i < te->size(); ++i) {
    const float x = te->data<float>()[i], y = tm->data<float>()[i];
    ASSERT_FALSE(std::isnan(x));
    EXPECT_NEAR(x, y, 1e-5 + 1e-4 * std::fabs(y)) << i;
    sum += x;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);

  // bench: JSON with ordered latency statistics.
  const std::string json_path = path("bench.json");
  auto be = run_cli("bench " + engine + " --iterations 20 --warmup-ms 5 --json " + json_path);
  ASSERT_EQ(be.code, 0) << be.output;
  EXPECT_TRUE(contains(be.output, "Latency (ms):")) << be.output;
  EXPECT_TRUE(contains(be.output, "Throughput:")) << be.output;
  std::ifstream jf(json_path);
  nlohmann::json j = nlohmann::json::parse(jf, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << be.output;
  const auto& lat = j.at("latency_ms");
  for (const char* k : {"min", "mean", "median", "p90", "p95", "p99", "max"}) ASSERT_TRUE(lat.contains(k)) << k;
  const double mn = lat["min"], med = lat["median"], p90 = lat["p90"], p95 = lat["p95"], p99 = lat["p99"], mx = lat["max"],
               mean = lat["mean"];
  EXPECT_GT(mn, 0.0);
  EXPECT_LE(mn, med);
  EXPECT_LE(med, p90);
  EXPECT_LE(p90, p95);
  EXPECT_LE(p95, p99);
  EXPECT_LE(p99, mx);
  EXPECT_LE(mn, mean);
  EXPECT_LE(mean, mx);
  EXPECT_EQ(j.at("iterations").get<int>(), 20);
  EXPECT_GT(j.at("throughput_qps").get<double>(), 0.0);
  EXPECT_EQ(j.at("engine").get<std::string>(), engine);
  EXPECT_EQ(j.at("shapes").at("image"), nlohmann::json({1, 3, 32, 32}));
  EXPECT_FALSE(j.contains("layers"));

  // compare: the engine matches the model.
  auto c = run_cli("compare " + kSample + " --engine " + engine);
  EXPECT_EQ(c.code, 0) << c.output;
  for (const char* key : {"Output probs float32[1,10]: PASS", "max abs err", "rel L2 err", "cosine", "top-1 agreement 1/1",
                          "top-5 agreement 1/1", "Result: PASS"}) {
    EXPECT_TRUE(contains(c.output, key)) << key << "\n" << c.output;
  }
  auto cl = run_cli("compare " + kSample + " --engine " + engine + " --layerwise --shapes image:1x3x32x32 --seed 3");
  EXPECT_EQ(cl.code, 0) << cl.output;
  EXPECT_TRUE(contains(cl.output, "Layerwise: ")) << cl.output;
  EXPECT_TRUE(contains(cl.output, "-> probs")) << cl.output;
  EXPECT_TRUE(contains(cl.output, "No compared layer exceeds the tolerance")) << cl.output;
}

TEST_F(CliEngine, BenchProfilesAModelBuiltInMemory) {
  const std::string json_path = path("bench.json");
  auto be = run_cli("bench " + kSample + " --shapes image:2x3x32x32 --iterations 5 --warmup-ms 0 --profile --json " +
                    json_path);
  ASSERT_EQ(be.code, 0) << be.output;
  EXPECT_TRUE(contains(be.output, "built in memory")) << be.output;
  EXPECT_TRUE(contains(be.output, "Per-layer times")) << be.output;
  std::ifstream jf(json_path);
  nlohmann::json j = nlohmann::json::parse(jf, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j.at("model").get<std::string>(), kSample);
  EXPECT_EQ(j.at("shapes").at("image"), nlohmann::json({2, 3, 32, 32}));
  EXPECT_EQ(j.at("iterations").get<int>(), 5);
  const auto& layers = j.at("layers");
  ASSERT_GT(layers.size(), 0u);
  double pct = 0, prev = INFINITY;
  for (const auto& l : layers) {
    EXPECT_FALSE(l.at("op").get<std::string>().empty());
    EXPECT_FALSE(l.at("tactic").get<std::string>().empty());
    const double ms = l.at("ms");
    EXPECT_GE(ms, 0.0);
    EXPECT_LE(ms, prev);  // sorted by time, slowest first
    prev = ms;
    pct += l.at("percent").get<double>();
  }
  EXPECT_NEAR(pct, 100.0, 1e-6);
}

TEST_F(CliEngine, CompareFailsOnAWrongEngineAndNamesTheLayer) {
  const std::string wrong = path("wrong.kiln");
  auto b = run_cli("build " + write_wrong_model(dir_) + " -o " + wrong);
  ASSERT_EQ(b.code, 0) << b.output;
  auto c = run_cli("compare " + kSample + " --engine " + wrong);
  EXPECT_EQ(c.code, 1) << c.output;
  EXPECT_TRUE(contains(c.output, "Output probs float32[1,10]: FAIL")) << c.output;
  EXPECT_TRUE(contains(c.output, "Result: FAIL")) << c.output;

  auto cl = run_cli("compare " + kSample + " --engine " + wrong + " --layerwise");
  EXPECT_EQ(cl.code, 1) << cl.output;
  // g and f differ in shape ([1,16,...] in the model, [1,3,...] in the engine); logits is
  // the first same-named value, and it diverges.
  EXPECT_TRUE(contains(cl.output, "skipped (shape differs")) << cl.output;
  EXPECT_TRUE(contains(cl.output, "First divergence: layer 'fc")) << cl.output;
  EXPECT_TRUE(contains(cl.output, "output 'logits'")) << cl.output;

}

TEST_F(CliEngine, DynamicProfilesAndTimingCache) {
  const std::string engine = path("dyn.kiln");
  const std::string cache = path("timing.cache");
  auto b = run_cli("build " + kSample + " -o " + engine +
                   " --min-shapes image:1x3x32x32 --opt-shapes image:2x3x32x32 --max-shapes image:4x3x32x32 --timing-cache " +
                   cache + " --threads 2 --fp16");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "image: min [1,3,32,32] opt [2,3,32,32] max [4,3,32,32]")) << b.output;
  EXPECT_TRUE(contains(b.output, "allowed: fp32 fp16")) << b.output;
  // Shapes inferred through the fused layers: fast tactics and a memory plan at the max.
  EXPECT_TRUE(contains(b.output, "onednn_fusedconv")) << b.output;
  EXPECT_FALSE(contains(b.output, "activations 0 bytes")) << b.output;
  EXPECT_TRUE(fs::exists(cache));
  auto b2 = run_cli("build " + kSample + " -o " + path("dyn2.kiln") +
                    " --min-shapes image:1x3x32x32 --opt-shapes image:2x3x32x32 --max-shapes image:4x3x32x32 --timing-cache " +
                    cache + " --threads 2 --fp16");
  ASSERT_EQ(b2.code, 0) << b2.output;
  EXPECT_TRUE(contains(b2.output, "(0 timed")) << b2.output;  // everything came from the cache

  auto in = run_cli("inspect " + engine);
  ASSERT_EQ(in.code, 0) << in.output;
  EXPECT_TRUE(contains(in.output, "\"fp16\":true")) << in.output;

  auto r = run_cli("run " + engine + " --shapes image:3x3x32x32");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "probs: float32[3,10]")) << r.output;
  auto r_default = run_cli("run " + engine);  // profile's opt shape
  ASSERT_EQ(r_default.code, 0) << r_default.output;
  EXPECT_TRUE(contains(r_default.output, "probs: float32[2,10]")) << r_default.output;
  auto r_big = run_cli("run " + engine + " --shapes image:8x3x32x32");
  EXPECT_EQ(r_big.code, 1) << r_big.output;
  EXPECT_TRUE(contains(r_big.output, "outside profile 0")) << r_big.output;

  auto c = run_cli("compare " + kSample + " --engine " + engine + " --shapes image:4x3x32x32");
  EXPECT_EQ(c.code, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "top-1 agreement 4/4")) << c.output;
}

TEST_F(CliEngine, BadFilesAndFlagsGiveClearErrors) {
  const std::string engine = path("sample.kiln");
  ASSERT_EQ(run_cli("build " + kSample + " -o " + engine).code, 0);

  // A truncated engine: every command that loads it fails cleanly.
  const auto size = fs::file_size(engine);
  fs::copy_file(engine, path("cut.kiln"));
  fs::resize_file(path("cut.kiln"), size / 2);
  for (const std::string& cmd : {"inspect " + path("cut.kiln"), "run " + path("cut.kiln"),
                                 "bench " + path("cut.kiln") + " --iterations 1",
                                 "compare " + kSample + " --engine " + path("cut.kiln")}) {
    auto r = run_cli(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "error: engine file '" + path("cut.kiln") + "'")) << cmd << "\n" << r.output;
  }
  // A flipped byte inside: the checksum catches it.
  {
    fs::copy_file(engine, path("flip.kiln"));
    std::fstream fl(path("flip.kiln"), std::ios::in | std::ios::out | std::ios::binary);
    fl.seekp(static_cast<std::streamoff>(size / 2));
    char c = 0;
    fl.read(&c, 1);
    fl.seekp(static_cast<std::streamoff>(size / 2));
    c = static_cast<char>(c ^ 0x5a);
    fl.write(&c, 1);
  }
  auto flip = run_cli("run " + path("flip.kiln"));
  EXPECT_EQ(flip.code, 1) << flip.output;
  EXPECT_TRUE(contains(flip.output, "error: ")) << flip.output;

  // Missing files.
  for (const std::string& cmd : {"build " + path("nope.onnx") + " -o " + path("x.kiln"), "bench " + path("nope.kiln"),
                                 "inspect " + path("nope.kiln"), "run " + path("nope.kiln"),
                                 "compare " + kSample + " --engine " + path("nope.kiln")}) {
    auto r = run_cli(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "nope.")) << cmd << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(path("x.kiln")));

  // A model where an engine is expected, bad shapes and devices.
  auto not_engine = run_cli("compare " + kSample + " --engine " + kSample);
  EXPECT_EQ(not_engine.code, 1);
  EXPECT_TRUE(contains(not_engine.output, "is not a kiln engine file")) << not_engine.output;
  auto bad_name = run_cli("build " + kSample + " -o " + path("y.kiln") + " --shapes picture:1x3x32x32");
  EXPECT_EQ(bad_name.code, 1);
  EXPECT_TRUE(contains(bad_name.output, "'picture' is not an input")) << bad_name.output;
  auto bad_dims = run_cli("build " + kSample + " -o " + path("y.kiln") + " --shapes image:1x3x16x16");
  EXPECT_EQ(bad_dims.code, 1);
  EXPECT_TRUE(contains(bad_dims.output, "image")) << bad_dims.output;
  auto cuda = run_cli("build " + kSample + " -o " + path("y.kiln") + " --device cuda");
  EXPECT_EQ(cuda.code, 1);
  EXPECT_TRUE(contains(cuda.output, "CUDA")) << cuda.output;
  auto bad_device = run_cli("build " + kSample + " -o " + path("y.kiln") + " --device tpu");
  EXPECT_EQ(bad_device.code, 1);
  EXPECT_TRUE(contains(bad_device.output, "unknown device 'tpu'")) << bad_device.output;
  auto run_bad_shape = run_cli("run " + engine + " --shapes image:2x3x32x32");
  EXPECT_EQ(run_bad_shape.code, 1);
  EXPECT_TRUE(contains(run_bad_shape.output, "image")) << run_bad_shape.output;
  auto bad_iters = run_cli("bench " + engine + " --iterations 0");
  EXPECT_EQ(bad_iters.code, 1);
  EXPECT_TRUE(contains(bad_iters.output, "--iterations")) << bad_iters.output;
}

}  // namespace
}  // namespace kiln
