// Shape rules of the ops the optimizer creates (Attention, FusedGemm, FusedConv): engines
// with dynamic shapes depend on them to plan memory and pick fast kernels.
#include <gtest/gtest.h>

#include "ir/shape_inference.h"
#include "model_builder.h"
#include "onnx/importer.h"

namespace kiln {
namespace {

using namespace kiln::testing;

std::string inferred(const onnx::ModelProto& m) {
  auto r = import_onnx_bytes(m.SerializeAsString(), ".", "test.onnx");
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (!r.is_ok()) return "";
  Node* n = r->graph->nodes().back();
  InferredTypes t;
  EXPECT_TRUE(infer_node_types(*n, &t));
  return sym_shape_str(t.shapes[0]);
}

TEST(ShapeInferenceFused, AttentionThreeDimensional) {
  auto m = make_model(24);
  add_input(m, "q", onnx::TensorProto::FLOAT, {"batch", "seq", "64"});
  add_input(m, "k", onnx::TensorProto::FLOAT, {"batch", "kv", "32"});
  add_input(m, "v", onnx::TensorProto::FLOAT, {"batch", "kv", "48"});
  auto* a = add_node(m, "Attention", {"q", "k", "v"}, {"y"});
  auto* h = a->add_attribute();
  h->set_name("q_num_heads");
  h->set_type(onnx::AttributeProto::INT);
  h->set_i(4);
  auto* kv = a->add_attribute();
  kv->set_name("kv_num_heads");
  kv->set_type(onnx::AttributeProto::INT);
  kv->set_i(2);
  add_output(m, "y", onnx::TensorProto::FLOAT, {});
  // V's head size is 48 / 2 = 24; four query heads give 96.
  EXPECT_EQ(inferred(m), "[batch,seq,96]");
}

TEST(ShapeInferenceFused, AttentionFourDimensional) {
  auto m = make_model(24);
  add_input(m, "q", onnx::TensorProto::FLOAT, {"2", "8", "seq", "16"});
  add_input(m, "k", onnx::TensorProto::FLOAT, {"2", "8", "kv", "16"});
  add_input(m, "v", onnx::TensorProto::FLOAT, {"2", "8", "kv", "24"});
  add_node(m, "Attention", {"q", "k", "v"}, {"y"});
  add_output(m, "y", onnx::TensorProto::FLOAT, {});
  EXPECT_EQ(inferred(m), "[2,8,seq,24]");
}

}  // namespace
}  // namespace kiln
