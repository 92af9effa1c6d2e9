// End-to-end tests of the kiln CLI binary: exit codes, messages and written files.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

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

const std::string kSample = std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx";

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(Cli, RunsSampleAndWritesOutputs) {
  auto r = run_cli("run " + kSample + " --output-dir " + dir_.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("probs: float32[1,10]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("run "), std::string::npos);
  auto t = read_npy((dir_ / "probs.npy").string());
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->dims(), (Dims{1, 10}));
  double sum = 0;
  for (int i = 0; i < 10; ++i) sum += t->data<float>()[i];
  EXPECT_NEAR(sum, 1.0, 1e-5);  // softmax output
}

TEST_F(Cli, UsesGivenInputFilesAndShapes) {
  Tensor x(DataType::kFloat32, {2, 3, 32, 32});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  ASSERT_TRUE(write_npy(x, (dir_ / "x.npy").string()).is_ok());
  auto r = run_cli("run " + kSample + " --input image=" + (dir_ / "x.npy").string() + " -o " + dir_.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("probs: float32[2,10]"), std::string::npos) << r.output;
  // The same input as a TensorProto .pb gives the same output.
  ASSERT_TRUE(write_tensor_pb(x, "image", (dir_ / "x.pb").string()).is_ok());
  fs::create_directories(dir_ / "pb");
  auto r2 = run_cli("run " + kSample + " --input image=" + (dir_ / "x.pb").string() + " -o " + (dir_ / "pb").string());
  ASSERT_EQ(r2.code, 0) << r2.output;
  auto a = read_npy((dir_ / "probs.npy").string());
  auto b = read_npy((dir_ / "pb" / "probs.npy").string());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0);

  auto r3 = run_cli("run " + kSample + " --shapes image:4x3x32x32");
  ASSERT_EQ(r3.code, 0) << r3.output;
  EXPECT_NE(r3.output.find("probs: float32[4,10]"), std::string::npos) << r3.output;
}

TEST_F(Cli, ReportsBadInputsClearly) {
  Tensor x(DataType::kFloat64, {1, 3, 32, 32});
  ASSERT_TRUE(write_npy(x, (dir_ / "x64.npy").string()).is_ok());
  auto r = run_cli("run " + kSample + " --input image=" + (dir_ / "x64.npy").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("input 'image': expected dtype float32, got float64"), std::string::npos) << r.output;

  auto r2 = run_cli("run " + kSample + " --input picture=" + (dir_ / "x64.npy").string());
  EXPECT_EQ(r2.code, 1);
  EXPECT_NE(r2.output.find("unknown input 'picture'"), std::string::npos) << r2.output;

  auto r3 = run_cli("run " + kSample + " --shapes image:1x3x16x16");
  EXPECT_EQ(r3.code, 1);
  EXPECT_NE(r3.output.find("image"), std::string::npos) << r3.output;

  auto r4 = run_cli("run " + kSample + " --input image=" + (dir_ / "missing.npy").string());
  EXPECT_EQ(r4.code, 1);
  EXPECT_NE(r4.output.find("missing.npy"), std::string::npos) << r4.output;
}

TEST_F(Cli, RejectsNonModelFiles) {
  std::ofstream(dir_ / "bad.onnx") << "this is not an onnx model at all";
  auto r = run_cli("run " + (dir_ / "bad.onnx").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("bad.onnx"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a valid ONNX model"), std::string::npos) << r.output;

  auto r2 = run_cli("inspect " + (dir_ / "nope.onnx").string());
  EXPECT_EQ(r2.code, 1);
  EXPECT_NE(r2.output.find("cannot open"), std::string::npos) << r2.output;
}

TEST_F(Cli, InspectPrintsInputsOutputsHistogramAndNodes) {
  auto r = run_cli("inspect " + kSample);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("image:float32[N,3,32,32]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("probs:float32[N,10]"), std::string::npos);
  EXPECT_NE(r.output.find("Conv: 2"), std::string::npos);
  EXPECT_NE(r.output.find("conv1: c1 = Conv(image"), std::string::npos);
}

TEST_F(Cli, SanitizesOutputFileNamesAndBoundsTokenIds) {
  // Output "logits/out:0" must land in logits_out_0.npy; int64 ids feeding a Gather on a
  // [50, 4] table must be random values below 50.
  auto m = testing::make_model();
  testing::add_input(m, "ids", onnx::TensorProto::INT64, {"batch", "seq"});
  std::vector<float> table(200);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
  testing::add_initializer_f32(m, "table", {50, 4}, table);
  testing::add_node(m, "Gather", {"table", "ids"}, {"emb"}, "embed");
  testing::add_node(m, "Relu", {"emb"}, {"logits/out:0"}, "relu");
  testing::add_output(m, "logits/out:0", onnx::TensorProto::FLOAT, {"batch", "seq", "4"});
  std::string path = (dir_ / "tok.onnx").string();
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  auto r = run_cli("run " + path + " --shapes ids:2x64 -o " + dir_.string());
  ASSERT_EQ(r.code, 0) << r.output;
  auto t = read_npy((dir_ / "logits_out_0.npy").string());
  ASSERT_TRUE(t.is_ok()) << r.output;
  EXPECT_EQ(t->dims(), (Dims{2, 64, 4}));
  // Row r of the table holds 4r..4r+3, so element 0 of each embedding is 4*id.
  for (int64_t i = 0; i < 128; ++i) {
    float v = t->data<float>()[i * 4];
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 200.0f);
  }
}

}  // namespace
}  // namespace kiln
