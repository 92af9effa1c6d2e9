// lower_float_precision (passes/lower_precision.cpp): the e2e models, optimized and then
// lowered to float16 and bfloat16, still compute what the float32 originals compute
// (reference interpreter, relative L2 error), keep float32 at their interface, and hold
// no float32 activation inside.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> load(const std::string& file) {
  auto r = import_onnx_file(std::string(KILN_SOURCE_DIR) + "/tests/models/" + file);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r->graph) : nullptr;
}

TensorMap inputs_for(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  TensorMap m;
  for (const Value* v : g.inputs()) {
    Dims d;
    for (const Dim& x : *v->shape) d.push_back(x.known() ? x.value : 2);
    Tensor t(v->dtype, d);
    if (v->dtype == DataType::kFloat32) {
      for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = nd(rng);
    } else {
      const bool mask = v->name().find("mask") != std::string::npos;
      for (int64_t i = 0; i < t.size(); ++i) t.data<int64_t>()[i] = mask ? (i % d.back() < 12 ? 1 : 0) : (i * 37 + seed) % 100;
    }
    m[v->name()] = t;
  }
  return m;
}

double rel_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got.get_double(i), w = want.get_double(i);
    if (!std::isfinite(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

void check(const std::string& file, DataType target, double tol) {
  auto ref = load(file);
  auto g = load(file);
  ASSERT_TRUE(ref && g);
  ASSERT_TRUE(optimize_graph(*g).is_ok());
  PassReport r;
  PassContext ctx(r);
  Status s = lower_float_precision(*g, target, ctx);
  ASSERT_TRUE(s.is_ok()) << s.message();
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    EXPECT_EQ(g->outputs()[i]->dtype, ref->outputs()[i]->dtype) << file;
    EXPECT_EQ(g->outputs()[i]->name(), ref->outputs()[i]->name()) << file;
  }
  for (const Node* n : g->nodes()) {
    if (n->op() == Op::Cast) continue;
    for (const Value* o : n->outputs()) {
      EXPECT_TRUE(!o || o->dtype != DataType::kFloat32) << file << ": " << n->describe() << " still makes float32";
    }
  }
  TensorMap in = inputs_for(*ref, 3);
  auto want = Interpreter(*ref).run(in);
  auto got = Interpreter(*g).run(in);
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  for (size_t i = 0; i < want->size(); ++i) {
    const double err = rel_l2((*got)[i], (*want)[i]);
    EXPECT_LE(err, tol) << file << " " << dtype_name(target) << " output " << i;
    // Rounding to 16 bits must show: a zero error would mean the graph still ran in float32.
    EXPECT_GT(err, 1e-6) << file << " " << dtype_name(target) << " output " << i;
  }
}

TEST(LowerPrecision, ModelsInFloat16) {
  for (const char* f : {"resnet_tiny.onnx", "mobilenetv3_tiny.onnx", "bert_tiny.onnx", "gpt_tiny.onnx"}) {
    check(f, DataType::kFloat16, 1e-2);
  }
}

TEST(LowerPrecision, ModelsInBFloat16) {
  for (const char* f : {"resnet_tiny.onnx", "bert_tiny.onnx"}) check(f, DataType::kBFloat16, 5e-2);
}

TEST(LowerPrecision, RejectsOtherTargets) {
  auto g = load("resnet_tiny.onnx");
  ASSERT_TRUE(g);
  PassReport r;
  PassContext ctx(r);
  EXPECT_FALSE(lower_float_precision(*g, DataType::kInt8, ctx).is_ok());
}

}  // namespace
}  // namespace kiln
