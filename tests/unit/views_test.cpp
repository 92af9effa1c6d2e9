// Reshape-like layers as views (ContextImpl::find_views / plan_arena): between activations
// the context owns they share their input's memory and run nothing; next to a graph output
// they copy. The memory of a chain's root must outlive every view of it.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kiln/kiln.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "runtime/engine_impl.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// x [2,3,4] -> Relu -> a -> Reshape [6,4] -> b -> Unsqueeze 0 -> c [1,6,4]
//   -> Transpose (0,2,1) -> d [1,4,6] -> Reshape [24] -> y (a graph output)
// The Transpose reads the views' memory while writing a new buffer: if the root's life
// ended at the Reshape, the planner could put d on top of it and the Transpose would read
// its own output.
onnx::ModelProto chain_model() {
  auto m = make_model();
  add_input(m, "x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  add_node(m, "Relu", {"x"}, {"a"}, "relu");
  auto* s1 = m.mutable_graph()->add_initializer();
  s1->set_name("shape1");
  s1->set_data_type(onnx::TensorProto::INT64);
  s1->add_dims(2);
  s1->add_int64_data(6);
  s1->add_int64_data(4);
  add_node(m, "Reshape", {"a", "shape1"}, {"b"}, "reshape1");
  auto* ax = m.mutable_graph()->add_initializer();
  ax->set_name("axes");
  ax->set_data_type(onnx::TensorProto::INT64);
  ax->add_dims(1);
  ax->add_int64_data(0);
  add_node(m, "Unsqueeze", {"b", "axes"}, {"c"}, "unsqueeze");
  add_ints_attr(add_node(m, "Transpose", {"c"}, {"d"}, "transpose"), "perm", {0, 2, 1});
  auto* s2 = m.mutable_graph()->add_initializer();
  s2->set_name("shape2");
  s2->set_data_type(onnx::TensorProto::INT64);
  s2->add_dims(1);
  s2->add_int64_data(24);
  add_node(m, "Reshape", {"d", "shape2"}, {"y"}, "reshape2");
  add_output(m, "y", onnx::TensorProto::FLOAT, {"24"});
  return m;
}

TEST(ReshapeViews, ShareTheInputMemoryAndMatchTheReference) {
  const auto m = chain_model();
  auto e = Builder().build_from_memory(m.SerializeAsString(), BuilderConfig{});
  ASSERT_TRUE(e) << e.status().message();
  auto ctx = (*e)->create_execution_context();
  ASSERT_TRUE(ctx) << ctx.status().message();

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Tensor x(DataType::kFloat32, {2, 3, 4});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = dist(rng);
  auto got = (*ctx)->run({{"x", x}});
  ASSERT_TRUE(got) << got.status().message();

  auto g = import_onnx_bytes(m.SerializeAsString(), ".");
  ASSERT_TRUE(g) << g.status().message();
  auto want = Interpreter(*g->graph).run({{"x", x}});
  ASSERT_TRUE(want) << want.status().message();
  const Tensor& y = got->at("y");
  ASSERT_EQ(y.dims(), (*want)[0].dims());
  for (int64_t i = 0; i < y.size(); ++i) ASSERT_EQ(y.data<float>()[i], (*want)[0].data<float>()[i]) << i;

  // Every Reshape-like layer is a view except the one writing the graph output; views point
  // into their input's memory.
  const ContextImpl& c = (*ctx)->impl();
  int views = 0, reshapes = 0;
  for (const Step& st : c.steps) {
    if (!is_shape_only(st.node->op())) continue;
    ++reshapes;
    const bool writes_output = c.spec->is_graph_output(st.node->output(0));
    EXPECT_EQ(st.view, !writes_output) << st.node->describe();
    if (st.view) {
      ++views;
      EXPECT_EQ(c.slots[static_cast<size_t>(st.out[0])].t.raw(), c.slots[static_cast<size_t>(st.in[0])].t.raw())
          << st.node->describe();
    }
  }
  EXPECT_GE(reshapes, 2);
  EXPECT_GE(views, 1);

  // A second run on other data (the views stay wired to the same memory).
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = dist(rng);
  got = (*ctx)->run({{"x", x}});
  ASSERT_TRUE(got) << got.status().message();
  want = Interpreter(*g->graph).run({{"x", x}});
  ASSERT_TRUE(want);
  const Tensor& y2 = got->at("y");  // (y refers to the first run's result, now gone)
  ASSERT_EQ(y2.dims(), (*want)[0].dims());
  for (int64_t i = 0; i < y2.size(); ++i) ASSERT_EQ(y2.data<float>()[i], (*want)[0].data<float>()[i]) << i;
}

}  // namespace
}  // namespace kiln
