#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "ir/verifier.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "onnx/tensor_io.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

Result<ImportedModel> import(const onnx::ModelProto& m) { return import_onnx_bytes(m.SerializeAsString(), ".", "test.onnx"); }

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

const std::string kSample = std::string(KILN_SOURCE_DIR) + "/models/sample_cnn.onnx";

TEST(Importer, ImportsSampleModelWithSymbolicBatch) {
  auto m = import_onnx_file(kSample);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const Graph& g = *m->graph;
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(sym_shape_str(g.inputs()[0]->shape), "[N,3,32,32]");
  EXPECT_EQ(g.num_nodes(), 10u);
  EXPECT_TRUE(verify_graph(g).is_ok());
}

TEST(Importer, RejectsGarbageAndTruncatedFiles) {
  std::mt19937 rng(7);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  auto r = import_onnx_bytes(garbage, ".", "garbage.onnx");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("garbage.onnx"), std::string::npos);

  std::string bytes = read_all(kSample);
  ASSERT_GT(bytes.size(), 100u);
  for (size_t cut : {size_t{0}, size_t{1}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    auto t = import_onnx_bytes(bytes.substr(0, cut), ".", "cut.onnx");
    EXPECT_FALSE(t.is_ok()) << "truncated at " << cut;
  }
}

TEST(Importer, ListsEveryUnsupportedNode) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2"});
  add_node(m, "FancyOp", {"x"}, {"a"}, "fancy1");
  add_node(m, "Relu", {"a"}, {"b"}, "relu");
  add_node(m, "Gizmo", {"b"}, {"y"}, "gizmo2", "com.example");
  auto* os = m.add_opset_import();
  os->set_domain("com.example");
  os->set_version(3);
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2"});
  auto r = import(m);
  ASSERT_FALSE(r.is_ok());
  const std::string& msg = r.status().message();
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(msg.find("2 unsupported nodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'fancy1': op FancyOp (domain 'ai.onnx', opset 17)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'gizmo2': op Gizmo (domain 'com.example', opset 3)"), std::string::npos) << msg;
}

TEST(Importer, RejectsDanglingInput) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2"});
  add_node(m, "Add", {"x", "nowhere"}, {"y"}, "add1");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2"});
  auto r = import(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("node 'add1' (Add): input 'nowhere' is not defined"), std::string::npos)
      << r.status().message();
}

TEST(Importer, RejectsCycle) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2"});
  add_node(m, "Add", {"x", "b"}, {"a"}, "n1");
  add_node(m, "Relu", {"a"}, {"b"}, "n2");
  add_output(m, "b", onnx::TensorProto::FLOAT, {"2"});
  auto r = import(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos) << r.status().message();
}

TEST(Importer, RejectsWrongAttributeType) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"1", "1", "4", "4"});
  add_initializer_f32(m, "w", {1, 1, 1, 1}, {2.0f});
  auto* n = add_node(m, "Conv", {"x", "w"}, {"y"}, "conv");
  add_float_attr(n, "group", 1.0f);
  add_output(m, "y", onnx::TensorProto::FLOAT, {"1", "1", "4", "4"});
  auto r = import(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("attribute 'group' must be of type int but is float"), std::string::npos)
      << r.status().message();
}

TEST(Importer, RejectsDuplicateOutputAndMissingGraphOutput) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2"});
  add_node(m, "Relu", {"x"}, {"y"}, "a");
  add_node(m, "Relu", {"x"}, {"y"}, "b");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2"});
  EXPECT_FALSE(import(m).is_ok());

  auto m2 = make_model();
  add_input(m2, "x", onnx::TensorProto::FLOAT, {"2"});
  add_output(m2, "missing", onnx::TensorProto::FLOAT, {"2"});
  auto r = import(m2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'missing'"), std::string::npos);
}

TEST(Importer, RejectsInitializerWithWrongSize) {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2"});
  add_initializer_f32(m, "w", {3}, {1.0f, 2.0f});
  add_node(m, "Add", {"x", "w"}, {"y"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"2"});
  auto r = import(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("initializer 'w'"), std::string::npos) << r.status().message();
}

// Squeeze-11 (axes attribute) and Squeeze-13 (axes input) import to the same canonical node.
TEST(Importer, NormalizesAttributeToInputAcrossOpsets) {
  auto old_model = make_model(11);
  add_input(old_model, "x", onnx::TensorProto::FLOAT, {"1", "3"});
  add_ints_attr(add_node(old_model, "Squeeze", {"x"}, {"y"}, "sq"), "axes", {0});
  add_output(old_model, "y", onnx::TensorProto::FLOAT, {"3"});
  auto r = import(old_model);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  Node* n = r->graph->nodes()[0];
  EXPECT_EQ(n->op(), Op::Squeeze);
  ASSERT_EQ(n->num_inputs(), 2u);
  ASSERT_TRUE(n->input(1)->is_constant());
  EXPECT_EQ(n->input(1)->constant().to_int_vector(), std::vector<int64_t>{0});
  EXPECT_FALSE(n->attrs.has("axes"));
}

TEST(Importer, ReadsExternalData) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "kiln_external_test";
  fs::create_directories(dir);
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 4.0f};
  {
    std::ofstream f(dir / "weights.bin", std::ios::binary);
    std::vector<char> pad(16, 0);
    f.write(pad.data(), 16);
    f.write(reinterpret_cast<const char*>(w.data()), 16);
  }
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"4"});
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add_kv = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add_kv("location", "weights.bin");
  add_kv("offset", "16");
  add_kv("length", "16");
  add_node(m, "Add", {"x", "w"}, {"y"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {"4"});
  auto r = import_onnx_bytes(m.SerializeAsString(), dir.string(), "ext.onnx");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Tensor& c = r->graph->find_value("w")->constant();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.data<float>()[i], w[static_cast<size_t>(i)]);

  // A location escaping the model folder is refused.
  t->mutable_external_data(0)->set_value("../weights.bin");
  EXPECT_FALSE(import_onnx_bytes(m.SerializeAsString(), dir.string(), "ext.onnx").is_ok());
  // A file too short for the tensor is refused.
  t->mutable_external_data(0)->set_value("weights.bin");
  t->mutable_external_data(1)->set_value("24");
  t->mutable_external_data(2)->set_value("16");
  EXPECT_FALSE(import_onnx_bytes(m.SerializeAsString(), dir.string(), "ext.onnx").is_ok());
  fs::remove_all(dir);
}

TEST(Importer, ReadsTypedFieldsForEveryDtype) {
  // int32_data carries int8/uint8/int16/uint16/bool/fp16/bf16; uint64_data carries uint32/uint64.
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::FLOAT16);
  p.add_dims(2);
  p.add_int32_data(Half(1.5f).bits);
  p.add_int32_data(Half(-2.0f).bits);
  auto t = tensor_from_proto(p, ".", "t");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->get_double(0), 1.5);
  EXPECT_EQ(t->get_double(1), -2.0);

  onnx::TensorProto u;
  u.set_data_type(onnx::TensorProto::UINT32);
  u.add_dims(1);
  u.add_uint64_data(4000000000ull);
  auto tu = tensor_from_proto(u, ".", "u");
  ASSERT_TRUE(tu.is_ok());
  EXPECT_EQ(tu->data<uint32_t>()[0], 4000000000u);

  onnx::TensorProto b;
  b.set_data_type(onnx::TensorProto::BOOL);
  b.add_dims(3);
  b.add_int32_data(1);
  b.add_int32_data(0);
  auto tb = tensor_from_proto(b, ".", "b");
  EXPECT_FALSE(tb.is_ok());  // 2 values for 3 elements
}

TEST(Runtime, ValidatesInputNamesDtypesAndShapes) {
  auto m = import_onnx_file(kSample);
  ASSERT_TRUE(m.is_ok());
  Interpreter interp(*m->graph);
  TensorMap wrong_name{{"img", Tensor(DataType::kFloat32, {1, 3, 32, 32})}};
  auto r1 = interp.run(wrong_name);
  ASSERT_FALSE(r1.is_ok());
  EXPECT_NE(r1.status().message().find("unknown input 'img'"), std::string::npos);
  EXPECT_NE(r1.status().message().find("image"), std::string::npos);

  TensorMap wrong_dtype{{"image", Tensor(DataType::kFloat64, {1, 3, 32, 32})}};
  auto r2 = interp.run(wrong_dtype);
  ASSERT_FALSE(r2.is_ok());
  EXPECT_NE(r2.status().message().find("expected dtype float32, got float64"), std::string::npos) << r2.status().message();

  TensorMap wrong_shape{{"image", Tensor(DataType::kFloat32, {1, 4, 32, 32})}};
  auto r3 = interp.run(wrong_shape);
  ASSERT_FALSE(r3.is_ok());
  EXPECT_NE(r3.status().message().find("expected shape [N,3,32,32], got [1,4,32,32]"), std::string::npos)
      << r3.status().message();
}

TEST(TensorIo, NpyRoundTripEveryDtype) {
  namespace fs = std::filesystem;
  std::string path = (fs::temp_directory_path() / "kiln_npy_test.npy").string();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt8, DataType::kInt16,
                      DataType::kInt32, DataType::kInt64, DataType::kUInt8, DataType::kUInt16, DataType::kUInt32,
                      DataType::kUInt64, DataType::kBool}) {
    Tensor t(dt, {2, 3});
    for (int64_t i = 0; i < t.size(); ++i) {
      dispatch_all(dt, [&]<typename T>() { t.data<T>()[i] = convert_element<T>(static_cast<int64_t>(i * 7 % 5 + 1)); });
    }
    ASSERT_TRUE(write_npy(t, path).is_ok());
    auto r = read_npy(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->dtype(), dt);
    EXPECT_EQ(r->dims(), t.dims());
    EXPECT_EQ(std::memcmp(r->raw(), t.raw(), t.nbytes()), 0) << dtype_name(dt);
  }
  // A truncated file is an error, not a crash.
  std::string bytes = read_all(path);
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  EXPECT_FALSE(read_npy(path).is_ok());
  fs::remove(path);
}

}  // namespace
}  // namespace kiln
