// Shared helpers for the optimizer-pass unit tests: load a model, count ops, run one
// pass (plus dead-code elimination), random inputs, and the numerics check that an
// optimized graph computes what the original computes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/verifier.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/interpreter.h"

namespace kiln::testing {

inline std::unique_ptr<Graph> load(const onnx::ModelProto& m) {
  auto r = import_onnx_bytes(m.SerializeAsString(), ".", "test.onnx");
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r->graph) : nullptr;
}

inline int count(const Graph& g, Op op) {
  int c = 0;
  for (Node* n : g.nodes()) c += n->op() == op;
  return c;
}

// Runs one pass (and dead-code elimination after it) and returns its rewrite count.
inline int run_pass(Graph& g, PassFn pass) {
  PassReport r;
  PassContext ctx(r);
  EXPECT_TRUE(pass(g, ctx).is_ok());
  PassReport d;
  PassContext dctx(d);
  EXPECT_TRUE(eliminate_dead_code(g, dctx).is_ok());
  EXPECT_TRUE(verify_graph(g).is_ok());
  return r.rewrites;
}

// Fresh random float inputs for every graph input (all tests use static float inputs).
inline TensorMap random_inputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  TensorMap m;
  for (Value* v : g.inputs()) {
    Dims d;
    for (const Dim& dim : *v->shape) d.push_back(dim.value);
    Tensor t(DataType::kFloat32, d);
    for (int64_t i = 0; i < t.size(); ++i) {
      float x = dist(rng);
      t.data<float>()[i] = x == 0.0f ? 0.5f : x;
    }
    m[v->name()] = t;
  }
  return m;
}

// Whether expect_same_outputs first asserts that each optimized output element is not NaN.
enum class NanCheck { kAssertNotNan, kNone };

// The optimized graph must compute what the original computes, output by output, on
// three random input sets: |want - got| <= rel_tol * (1 + |want|) per element. Fused ops
// evaluate the same formula with other rounding, so their tests pass a looser rel_tol.
inline void expect_same_outputs(const onnx::ModelProto& m, const Graph& optimized, double rel_tol = 1e-6,
                                NanCheck nan_check = NanCheck::kAssertNotNan) {
  auto original = load(m);
  ASSERT_TRUE(original);
  for (uint32_t seed : {1u, 2u, 3u}) {
    TensorMap in = random_inputs(*original, seed);
    auto want = Interpreter(*original).run(in);
    auto got = Interpreter(optimized).run(in);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    ASSERT_EQ(want->size(), got->size());
    for (size_t i = 0; i < want->size(); ++i) {
      const Tensor& a = (*want)[i];
      const Tensor& b = (*got)[i];
      ASSERT_EQ(a.dims(), b.dims());
      for (int64_t k = 0; k < a.size(); ++k) {
        if (nan_check == NanCheck::kAssertNotNan) {
          ASSERT_FALSE(std::isnan(b.get_double(k)));
        }
        EXPECT_NEAR(a.get_double(k), b.get_double(k), rel_tol * (1 + std::fabs(a.get_double(k))));
      }
    }
  }
}

// Deterministic values in [lo, hi).
inline std::vector<float> values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A float scalar initializer.
inline void add_scalar(onnx::ModelProto& m, const std::string& name, float v) {
  add_initializer_f32(m, name, {}, {v});
}

}  // namespace kiln::testing
