// The oneDNN tactics (Conv/FusedConv, MatMul/FusedGemm/Gemm, pooling) against the reference
// kernels: random inputs, outputs and scratch pre-filled with NaN, several shapes each.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "fast_kernel_test_util.h"

namespace kiln::testing::fast {
namespace {

constexpr DataType kF32 = DataType::kFloat32;

// oneDNN 2.6 cannot execute a primitive without a few small heap allocations of its own:
// dnnl_primitive_execute builds a std::unordered_map of the arguments and an execution
// context, and the user scratchpad is handed out through heap-allocated sub-storage
// objects. The kernels allocate nothing themselves (no buffers: those are scratch), so the
// allowance bounds these bookkeeping allocations; AllocationsDoNotGrowWithSize checks that
// they are a constant per primitive, not a function of the tensor sizes.
constexpr int64_t kOnednnRunAllocations = 40;

using Ints = std::vector<int64_t>;

// Runs `tactic` and the reference on the same inputs and compares (tol relative to 1+|ref|).
void check(const std::string& tactic, Op op, const Attributes& a, const std::vector<const Tensor*>& inputs,
           const std::vector<bool>& constant, double tol, const std::string& what) {
  std::vector<Tensor> ref = run_ref(op, a, inputs);
  ASSERT_EQ(ref.size(), 1u) << what;
  const LayerSpec spec = make_spec(op, &a, inputs, {kF32}, constant);
  FastRun r = run_fast(tactic, spec, inputs, shapes_of(ref), 2, kOnednnRunAllocations);
  ASSERT_TRUE(r.status.is_ok()) << tactic << " " << what << ": " << r.status.message();
  expect_near_tensor(r.outputs[0], ref[0], tol, tactic + " " + what);
}

// ---- convolution ----

struct ConvCase {
  Dims x, w;
  Ints strides, pads, dilations;
  int64_t group;
  std::string auto_pad;
  bool bias;
};

Attributes conv_attrs(const ConvCase& c) {
  Attributes a;
  if (!c.strides.empty()) a.set("strides", c.strides);
  if (!c.pads.empty()) a.set("pads", c.pads);
  if (!c.dilations.empty()) a.set("dilations", c.dilations);
  if (c.group != 1) a.set("group", c.group);
  if (!c.auto_pad.empty()) a.set("auto_pad", c.auto_pad);
  a.set("kernel_shape", Ints(c.w.begin() + 2, c.w.end()));
  return a;
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{1, 16, 14, 14}, {32, 16, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, "", true},             // 3x3 same
      {{2, 3, 17, 13}, {5, 3, 3, 3}, {2, 2}, {1, 0, 2, 1}, {}, 1, "", true},            // odd sizes, asym pads
      {{1, 24, 9, 11}, {40, 24, 1, 1}, {}, {}, {}, 1, "", false},                        // 1x1, no bias
      {{1, 8, 12, 12}, {8, 1, 3, 3}, {}, {1, 1, 1, 1}, {}, 8, "", true},                 // depthwise
      {{1, 12, 10, 10}, {18, 4, 3, 3}, {1, 2}, {2, 1, 2, 1}, {2, 1}, 3, "", true},       // grouped, dilated
      {{1, 6, 11, 10}, {7, 6, 3, 2}, {2, 3}, {}, {}, 1, "SAME_UPPER", true},             // auto_pad
      {{1, 6, 11, 10}, {7, 6, 4, 3}, {2, 1}, {}, {}, 1, "SAME_LOWER", false},
      {{1, 5, 9, 8}, {3, 5, 2, 2}, {}, {}, {}, 1, "VALID", true},
      {{2, 5, 23}, {6, 5, 4}, {3}, {1, 2}, {}, 1, "", true},                             // 1-D
      {{1, 3, 5, 6, 7}, {4, 3, 3, 2, 3}, {1, 2, 1}, {1, 0, 1, 1, 1, 0}, {}, 1, "", true},  // 3-D
      {{1, 3, 31, 31}, {16, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}, {}, 1, "", true},            // stem-like
  };
  return cases;
}

TEST(FastOnednnConv, MatchesReference) {
  uint32_t seed = 1;
  for (const ConvCase& c : conv_cases()) {
    const Attributes a = conv_attrs(c);
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32({c.w[0]}, seed++);
    for (const char* tactic : {"onednn_conv", "onednn_conv_nchw"}) {
      const std::string what = "x" + dims_str(c.x) + " w" + dims_str(c.w);
      if (c.bias) {
        check(tactic, Op::Conv, a, {&x, &w, &b}, {false, true, true}, 1e-4, what);
        check(tactic, Op::Conv, a, {&x, &w, &b}, {false, true, false}, 1e-4, what + " (runtime bias)");
      } else {
        check(tactic, Op::Conv, a, {&x, &w}, {false, true}, 1e-4, what);
      }
    }
  }
}

// Every activation FusedConv knows, with and without the residual Z and the bias.
TEST(FastOnednnConv, FusedConvEpilogues) {
  struct Act {
    std::string name;
    std::vector<std::pair<std::string, float>> floats;
    std::string approximate;
  };
  const std::vector<Act> acts = {
      {"None", {}, ""},
      {"Relu", {}, ""},
      {"LeakyRelu", {{"alpha", 0.13f}}, ""},
      {"Clip", {{"min", -0.5f}, {"max", 1.5f}}, ""},
      {"Clip", {{"min", 0.0f}}, ""},
      {"Clip", {{"max", 6.0f}}, ""},
      {"Sigmoid", {}, ""},
      {"HardSigmoid", {{"alpha", 0.3f}, {"beta", 0.4f}}, ""},
      {"HardSwish", {}, ""},
      {"SiLU", {}, ""},
      {"Swish", {{"alpha", 1.7f}}, ""},
      {"Tanh", {}, ""},
      {"Gelu", {}, "none"},
      {"Gelu", {}, "tanh"},
  };
  const std::vector<ConvCase> shapes = {
      {{1, 16, 10, 10}, {24, 16, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, "", true},
      {{2, 5, 7, 9}, {3, 5, 1, 1}, {}, {}, {}, 1, "", true},
      {{1, 8, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 8, "", true},
  };
  uint32_t seed = 100;
  for (const ConvCase& c : shapes) {
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32({c.w[0]}, seed++);
    const std::vector<Tensor> ref_y = run_ref(Op::Conv, conv_attrs(c), {&x, &w, &b});
    ASSERT_EQ(ref_y.size(), 1u);
    const Tensor z = random_f32(ref_y[0].dims(), seed++);
    for (const Act& act : acts) {
      Attributes a = conv_attrs(c);
      a.set("activation", act.name);
      for (const auto& [k, v] : act.floats) a.set(k, v);
      if (!act.approximate.empty()) a.set("approximate", act.approximate);
      for (const char* tactic : {"onednn_fusedconv", "onednn_fusedconv_nchw"}) {
        const std::string what = act.name + " x" + dims_str(c.x);
        check(tactic, Op::FusedConv, a, {&x, &w, &b, &z}, {false, true, true, false}, 1e-4, what + " +Z");
        check(tactic, Op::FusedConv, a, {&x, &w, &b}, {false, true, true}, 1e-4, what);
        check(tactic, Op::FusedConv, a, {&x, &w, nullptr, &z}, {false, true, false, false}, 1e-4, what + " no B +Z");
      }
    }
  }
}

// One kernel, prepared once, run on different input and output buffers (rebinding), then
// prepared again for another shape.
TEST(FastOnednnConv, RebindAndReprepare) {
  ConvCase c{{1, 16, 12, 12}, {16, 16, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, "", true};
  Attributes a = conv_attrs(c);
  a.set("activation", std::string("Relu"));
  const Tensor w = random_f32(c.w, 7), b = random_f32({16}, 8);
  for (const char* name : {"onednn_fusedconv", "onednn_fusedconv_nchw"}) {
    const kiln::fast::Tactic* t = find_tactic_for(name, Op::FusedConv);
    ASSERT_NE(t, nullptr);
    const Tensor x0 = random_f32(c.x, 9);
    const LayerSpec spec = make_spec(Op::FusedConv, &a, {&x0, &w, &b, &x0}, {kF32}, {false, true, true, false});
    auto k = t->create(spec);
    ASSERT_TRUE(k.is_ok()) << k.status().message();
    for (int64_t hw : {12, 7, 12}) {
      const Tensor x1 = random_f32({1, 16, hw, hw}, static_cast<uint32_t>(10 + hw));
      const Tensor x2 = random_f32({1, 16, hw, hw}, static_cast<uint32_t>(20 + hw));
      const Tensor z1 = random_f32({1, 16, hw, hw}, static_cast<uint32_t>(30 + hw));
      std::vector<Tensor> ref1 = run_ref(Op::FusedConv, a, {&x1, &w, &b, &z1});
      std::vector<Tensor> ref2 = run_ref(Op::FusedConv, a, {&x2, &w, &b, &z1});
      size_t scratch_bytes = 0;
      Status s = (*k)->prepare({{kF32, x1.dims()}, {kF32, w.dims()}, {kF32, b.dims()}, {kF32, z1.dims()}},
                               shapes_of(ref1), &scratch_bytes);
      ASSERT_TRUE(s.is_ok()) << s.message();
      std::vector<float> scratch1(scratch_bytes / 4 + 16), scratch2(scratch_bytes / 4 + 16);
      Tensor y1(kF32, ref1[0].dims()), y2(kF32, ref1[0].dims());
      poison(y1);
      poison(y2);
      ASSERT_TRUE((*k)->run({&x1, &w, &b, &z1}, {&y1}, scratch1.data()).is_ok());
      ASSERT_TRUE((*k)->run({&x2, &w, &b, &z1}, {&y2}, scratch2.data()).is_ok());
      expect_near_tensor(y1, ref1[0], 1e-4, std::string(name) + " first buffers");
      expect_near_tensor(y2, ref2[0], 1e-4, std::string(name) + " second buffers");
      // In place: Z is the output buffer itself.
      Tensor y3 = z1.clone();
      ASSERT_TRUE((*k)->run({&x1, &w, &b, &y3}, {&y3}, scratch1.data()).is_ok());
      expect_near_tensor(y3, ref1[0], 1e-4, std::string(name) + " residual in place");
    }
  }
}

// A kernel prepared for the inputs, with scratch; run() runs it into fresh outputs.
struct Prepared {
  std::unique_ptr<Kernel> kernel;
  std::vector<float> scratch;
  std::vector<Tensor> outputs;
  Status run(const std::vector<const Tensor*>& inputs) {
    std::vector<Tensor*> outs;
    for (Tensor& o : outputs) outs.push_back(&o);
    return kernel->run(inputs, outs, scratch.data());
  }
};

Prepared prepare_kernel(const std::string& name, const LayerSpec& spec, const std::vector<const Tensor*>& inputs,
                        const std::vector<TensorShape>& out_shapes) {
  Prepared p;
  const Tactic* t = find_tactic_for(name, spec.op);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return p;
  auto k = t->create(spec);
  EXPECT_TRUE(k.is_ok()) << k.status().message();
  if (!k.is_ok()) return p;
  p.kernel = std::move(*k);
  std::vector<TensorShape> in_shapes;
  for (const Tensor* x : inputs) in_shapes.push_back(x ? TensorShape{x->dtype(), x->dims()} : TensorShape{});
  size_t bytes = 0;
  const Status s = p.kernel->prepare(in_shapes, out_shapes, &bytes);
  EXPECT_TRUE(s.is_ok()) << s.message();
  p.scratch.resize(bytes / sizeof(float) + 16);
  for (const TensorShape& o : out_shapes) p.outputs.emplace_back(o.dtype, o.dims);
  return p;
}

// Different kernels run at the same time from different threads.
TEST(FastOnednnConv, ConcurrentKernels) {
  ConvCase c{{1, 8, 16, 16}, {16, 8, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, "", true};
  const Attributes a = conv_attrs(c);
  std::vector<Tensor> xs, ws, bs, refs;
  for (uint32_t i = 0; i < 4; ++i) {
    xs.push_back(random_f32(c.x, 200 + i));
    ws.push_back(random_f32(c.w, 300 + i));
    bs.push_back(random_f32({16}, 400 + i));
    refs.push_back(run_ref(Op::Conv, a, {&xs[i], &ws[i], &bs[i]})[0]);
  }
  std::vector<Prepared> kernels;
  for (size_t i = 0; i < 4; ++i) {
    const LayerSpec spec = make_spec(Op::Conv, &a, {&xs[i], &ws[i], &bs[i]}, {kF32}, {false, true, true}, 1);
    kernels.push_back(prepare_kernel(i % 2 ? "onednn_conv" : "onednn_conv_nchw", spec, {&xs[i], &ws[i], &bs[i]},
                                     {{kF32, refs[i].dims()}}));
    ASSERT_TRUE(kernels.back().kernel);
  }
  std::vector<Status> status(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 20 && status[i].is_ok(); ++rep) status[i] = kernels[i].run({&xs[i], &ws[i], &bs[i]});
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(status[i].is_ok()) << status[i].message();
    expect_near_tensor(kernels[i].outputs[0], refs[i], 1e-4, "thread " + std::to_string(i));
  }
}

// What a run() allocates comes from inside oneDNN's execute call: a constant per
// primitive, the same for a small and a large layer.
TEST(FastOnednnConv, AllocationsDoNotGrowWithSize) {
  struct Layer {
    std::string tactic;
    Op op;
    std::vector<Dims> small, large;  // input dims
  };
  Attributes conv;
  conv.set("pads", Ints{1, 1, 1, 1});
  conv.set("activation", std::string("Relu"));
  Attributes pool;
  pool.set("kernel_shape", Ints{3, 3});
  pool.set("strides", Ints{2, 2});
  const Attributes none;
  Attributes gelu;
  gelu.set("activation", std::string("Gelu"));
  const std::vector<Layer> layers = {
      {"onednn_fusedconv", Op::FusedConv, {{1, 16, 8, 8}, {16, 16, 3, 3}, {16}, {1, 16, 8, 8}},
       {{1, 16, 56, 56}, {16, 16, 3, 3}, {16}, {1, 16, 56, 56}}},
      {"onednn_fusedconv_nchw", Op::FusedConv, {{1, 16, 8, 8}, {16, 16, 3, 3}, {16}, {1, 16, 8, 8}},
       {{1, 16, 56, 56}, {16, 16, 3, 3}, {16}, {1, 16, 56, 56}}},
      {"onednn_fusedgemm", Op::FusedGemm, {{1, 4, 64}, {64, 64}, {64}}, {{1, 384, 64}, {64, 64}, {64}}},
      {"onednn_matmul", Op::MatMul, {{2, 4, 8}, {2, 8, 4}}, {{2, 64, 128}, {2, 128, 64}}},
      {"onednn_maxpool", Op::MaxPool, {{1, 8, 9, 9}}, {{1, 8, 111, 111}}},
  };
  for (const Layer& l : layers) {
    const Attributes& a = l.op == Op::FusedConv ? conv : l.op == Op::MaxPool ? pool : l.op == Op::FusedGemm ? gelu : none;
    int64_t counts[2] = {0, 0};
    for (int big = 0; big < 2; ++big) {
      std::vector<Tensor> ins;
      uint32_t seed = 1000;
      for (const Dims& d : big ? l.large : l.small) ins.push_back(random_f32(d, seed++));
      std::vector<const Tensor*> ptrs;
      for (const Tensor& t : ins) ptrs.push_back(&t);
      std::vector<Tensor> ref = run_ref(l.op, a, ptrs);
      ASSERT_EQ(ref.size(), 1u);
      std::vector<bool> constant(ins.size(), false);
      if (l.op != Op::MatMul && l.op != Op::MaxPool) constant[1] = constant[2] = true;
      Prepared p = prepare_kernel(l.tactic, make_spec(l.op, &a, ptrs, {kF32}, constant), ptrs, shapes_of(ref));
      ASSERT_TRUE(p.kernel);
      ASSERT_TRUE(p.run(ptrs).is_ok());  // warm up (OpenMP teams, lazily built tables)
      Status s;
      counts[big] = count_allocations([&] { s = p.run(ptrs); });
      ASSERT_TRUE(s.is_ok()) << s.message();
      expect_near_tensor(p.outputs[0], ref[0], 1e-4, l.tactic);
    }
    std::printf("%s: %lld heap allocations per run (inside oneDNN)\n", l.tactic.c_str(),
                static_cast<long long>(counts[1]));
    EXPECT_EQ(counts[0], counts[1]) << l.tactic;
    EXPECT_LE(counts[1], kOnednnRunAllocations) << l.tactic;
  }
}

TEST(FastOnednnConv, RejectsWhatItCannotRun) {
  const Tensor x = random_f32({1, 4, 6, 6}, 1), w = random_f32({4, 4, 3, 3}, 2), b = random_f32({4}, 3);
  Attributes a;
  // Weights not constant.
  EXPECT_FALSE(tactic_supports("onednn_conv", make_spec(Op::Conv, &a, {&x, &w, &b}, {kF32}, {false, false, true})));
  // float64.
  const Tensor x64 = cast_tensor(x, DataType::kFloat64), w64 = cast_tensor(w, DataType::kFloat64);
  EXPECT_FALSE(
      tactic_supports("onednn_conv", make_spec(Op::Conv, &a, {&x64, &w64}, {DataType::kFloat64}, {false, true})));
  // kernel_shape that disagrees with W.
  Attributes ks;
  ks.set("kernel_shape", Ints{2, 2});
  EXPECT_FALSE(tactic_supports("onednn_conv", make_spec(Op::Conv, &ks, {&x, &w}, {kF32}, {false, true})));
  // Group that does not divide the output channels.
  Attributes g3;
  g3.set("group", int64_t{3});
  EXPECT_FALSE(tactic_supports("onednn_conv", make_spec(Op::Conv, &g3, {&x, &w}, {kF32}, {false, true})));
  // Unknown auto_pad and activation.
  Attributes ap;
  ap.set("auto_pad", std::string("SAME_MIDDLE"));
  EXPECT_FALSE(tactic_supports("onednn_conv", make_spec(Op::Conv, &ap, {&x, &w}, {kF32}, {false, true})));
  Attributes act;
  act.set("activation", std::string("Softplus"));
  EXPECT_FALSE(
      tactic_supports("onednn_fusedconv", make_spec(Op::FusedConv, &act, {&x, &w, &b}, {kF32}, {false, true, true})));
  Attributes bad_clip;
  bad_clip.set("activation", std::string("Clip"));
  bad_clip.set("min", 2.0f);
  bad_clip.set("max", 1.0f);
  EXPECT_FALSE(tactic_supports("onednn_fusedconv",
                               make_spec(Op::FusedConv, &bad_clip, {&x, &w, &b}, {kF32}, {false, true, true})));
  // The supported baseline, for contrast.
  EXPECT_TRUE(tactic_supports("onednn_conv", make_spec(Op::Conv, &a, {&x, &w, &b}, {kF32}, {false, true, false})));

  // Shapes that do not fit fail prepare cleanly: a residual of the wrong shape.
  Attributes relu;
  relu.set("activation", std::string("Relu"));
  const Tensor z_bad = random_f32({1, 4, 3, 3}, 4);
  const LayerSpec spec = make_spec(Op::FusedConv, &relu, {&x, &w, &b, &z_bad}, {kF32}, {false, true, true, false});
  FastRun r = run_fast("onednn_fusedconv", spec, {&x, &w, &b, &z_bad}, {{kF32, {1, 4, 4, 4}}});
  EXPECT_FALSE(r.status.is_ok());
  // And an output shape that is not the conv's.
  r = run_fast("onednn_conv", make_spec(Op::Conv, &a, {&x, &w}, {kF32}, {false, true}), {&x, &w},
               {{kF32, {1, 4, 5, 5}}});
  EXPECT_FALSE(r.status.is_ok());
}

// Fast vs reference on a ResNet-50 stage-1 3x3 conv (64 -> 64, 56x56, batch 1). Prints the
// times; numbers are for the report, so the test is disabled by default (the reference
// takes a while): run with --gtest_also_run_disabled_tests.
TEST(FastOnednnConv, DISABLED_ResNetConvTiming) {
  ConvCase c{{1, 64, 56, 56}, {64, 64, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, "", true};
  Attributes a = conv_attrs(c);
  a.set("activation", std::string("Relu"));
  const Tensor x = random_f32(c.x, 1), w = random_f32(c.w, 2), b = random_f32({64}, 3);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  std::vector<Tensor> ref = run_ref(Op::FusedConv, a, {&x, &w, &b});
  const double ref_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  for (const char* name : {"onednn_fusedconv", "onednn_fusedconv_nchw"}) {
    const LayerSpec spec = make_spec(Op::FusedConv, &a, {&x, &w, &b}, {kF32}, {false, true, true}, 2);
    auto k = find_tactic_for(name, Op::FusedConv)->create(spec);
    ASSERT_TRUE(k.is_ok());
    size_t sb = 0;
    ASSERT_TRUE((*k)->prepare({{kF32, x.dims()}, {kF32, w.dims()}, {kF32, b.dims()}}, shapes_of(ref), &sb).is_ok());
    std::vector<float> scratch(sb / 4 + 16);
    Tensor y(kF32, ref[0].dims());
    std::vector<double> times;
    for (int i = 0; i < 60; ++i) {
      t0 = clock::now();
      ASSERT_TRUE((*k)->run({&x, &w, &b}, {&y}, scratch.data()).is_ok());
      times.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    expect_near_tensor(y, ref[0], 1e-4, name);
    std::printf("%s: min %.3f ms, median %.3f ms; reference %.1f ms (scratch %zu bytes)\n", name, times[0],
                times[times.size() / 2], ref_ms, sb);
  }
}

// ---- matmul family ----

TEST(FastOnednnMatMul, MatMulShapes) {
  struct Case {
    Dims a, b;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 3}},          {{2, 3, 5, 7}, {7, 9}},        {{1, 17, 33}, {33, 65}},
      {{2, 1, 5, 7}, {3, 7, 4}}, {{3, 5, 7}, {1, 7, 4}},        {{4, 2, 3}, {4, 3, 6}},
      {{7}, {7, 3}},             {{5, 7}, {7}},                 {{7}, {7}},
      {{2, 5, 7}, {2, 7, 1}},    {{1, 2, 6, 3}, {2, 1, 3, 5}},  {{9}, {2, 9, 4}},
  };
  uint32_t seed = 500;
  for (const Case& c : cases) {
    const Tensor a = random_f32(c.a, seed++), b = random_f32(c.b, seed++);
    const Attributes none;
    const std::string what = dims_str(c.a) + " x " + dims_str(c.b);
    check("onednn_matmul", Op::MatMul, none, {&a, &b}, {false, false}, 1e-5, what);
    check("onednn_matmul", Op::MatMul, none, {&a, &b}, {false, true}, 1e-5, what + " (constant B)");
    check("onednn_matmul", Op::MatMul, none, {&a, &b}, {true, true}, 1e-5, what + " (both constant)");
  }
}

TEST(FastOnednnMatMul, FusedGemm) {
  struct Case {
    Dims a;
    int64_t n;
    Dims bias;
  };
  const std::vector<Case> cases = {{{1, 13, 48}, 37, {37}}, {{2, 3, 5, 16}, 8, {1, 8}}, {{16}, 20, {20}},
                                   {{64, 96}, 128, {128}}};
  const std::vector<std::pair<std::string, std::string>> acts = {
      {"None", ""}, {"Relu", ""}, {"Gelu", "none"}, {"Gelu", "tanh"}};
  uint32_t seed = 600;
  for (const Case& c : cases) {
    const int64_t K = c.a.back();
    const Tensor a = random_f32(c.a, seed++), w = random_f32({K, c.n}, seed++), b = random_f32(c.bias, seed++);
    for (const auto& [act, approx] : acts) {
      Attributes at;
      at.set("activation", act);
      if (!approx.empty()) at.set("approximate", approx);
      const std::string what = act + approx + " " + dims_str(c.a) + " N=" + std::to_string(c.n);
      check("onednn_fusedgemm", Op::FusedGemm, at, {&a, &w, &b}, {false, true, true}, 1e-5, what);
      check("onednn_fusedgemm", Op::FusedGemm, at, {&a, &w, &b}, {false, false, false}, 1e-5, what + " runtime W, B");
    }
  }
}

TEST(FastOnednnMatMul, Gemm) {
  const int64_t M = 6, K = 11, N = 9;
  const std::vector<Dims> c_shapes = {{}, {N}, {1, N}, {M, 1}, {M, N}, {1}};
  uint32_t seed = 700;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const Tensor a = random_f32(ta ? Dims{K, M} : Dims{M, K}, seed++);
      const Tensor b = random_f32(tb ? Dims{N, K} : Dims{K, N}, seed++);
      for (const Dims& cd : c_shapes) {
        const Tensor c = random_f32(cd, seed++);
        for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, 2.0f}, std::pair{-1.5f, 0.0f}}) {
          Attributes at;
          at.set("transA", int64_t{ta});
          at.set("transB", int64_t{tb});
          at.set("alpha", alpha);
          at.set("beta", beta);
          const std::string what = "transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C" +
                                   dims_str(cd) + " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta);
          check("onednn_gemm", Op::Gemm, at, {&a, &b, &c}, {false, true, true}, 1e-5, what);
          check("onednn_gemm", Op::Gemm, at, {&a, &b, &c}, {false, false, false}, 1e-5, what + " runtime B, C");
        }
        Attributes plain;
        plain.set("transA", int64_t{ta});
        plain.set("transB", int64_t{tb});
        check("onednn_gemm", Op::Gemm, plain, {&a, &b}, {false, true}, 1e-5, "no C");
      }
    }
  }
  // ResNet-50's classifier: [1, 2048] x [1000, 2048]^T + [1000].
  const Tensor a = random_f32({1, 2048}, 1), b = random_f32({1000, 2048}, 2), c = random_f32({1000}, 3);
  Attributes fc;
  fc.set("transB", int64_t{1});
  check("onednn_gemm", Op::Gemm, fc, {&a, &b, &c}, {false, true, true}, 1e-4, "classifier");
}

TEST(FastOnednnMatMul, RejectsWhatItCannotRun) {
  const Tensor a = random_f32({4, 8}, 1), w = random_f32({8, 5}, 2), b = random_f32({5}, 3);
  const Tensor a64 = cast_tensor(a, DataType::kFloat64), w64 = cast_tensor(w, DataType::kFloat64);
  const Attributes none;
  EXPECT_FALSE(tactic_supports("onednn_matmul", make_spec(Op::MatMul, &none, {&a64, &w64}, {DataType::kFloat64})));
  const Tensor ai = cast_tensor(a, DataType::kInt32), wi = cast_tensor(w, DataType::kInt32);
  EXPECT_FALSE(tactic_supports("onednn_matmul", make_spec(Op::MatMul, &none, {&ai, &wi}, {DataType::kInt32})));
  Attributes tanh_act;
  tanh_act.set("activation", std::string("Tanh"));  // not a FusedGemm activation
  EXPECT_FALSE(tactic_supports("onednn_fusedgemm",
                               make_spec(Op::FusedGemm, &tanh_act, {&a, &w, &b}, {kF32}, {false, true, true})));
  Attributes relu;
  relu.set("activation", std::string("Relu"));
  const Tensor b_bad = random_f32({4, 5}, 4);  // a full bias is not a row
  EXPECT_FALSE(tactic_supports("onednn_fusedgemm",
                               make_spec(Op::FusedGemm, &relu, {&a, &w, &b_bad}, {kF32}, {false, true, true})));
  EXPECT_TRUE(
      tactic_supports("onednn_fusedgemm", make_spec(Op::FusedGemm, &relu, {&a, &w, &b}, {kF32}, {false, true, true})));
  const Tensor c3 = random_f32({1, 4, 5}, 5);
  EXPECT_FALSE(tactic_supports("onednn_gemm", make_spec(Op::Gemm, &none, {&a, &w, &c3}, {kF32}, {false, true, true})));
  // Mismatched inner dimensions fail prepare cleanly.
  const Tensor w_bad = random_f32({7, 5}, 6);
  FastRun r = run_fast("onednn_matmul", make_spec(Op::MatMul, &none, {&a, &w_bad}, {kF32}), {&a, &w_bad},
                       {{kF32, {4, 5}}});
  EXPECT_FALSE(r.status.is_ok());
}

// ---- pooling ----

TEST(FastOnednnPool, MaxAndAveragePool) {
  struct Case {
    Dims x;
    Ints kernel, strides, pads, dilations;
    std::string auto_pad;
    int64_t ceil_mode;
  };
  const std::vector<Case> cases = {
      {{1, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, "", 0},  // ResNet stem
      {{2, 5, 9, 11}, {2, 2}, {2, 2}, {}, {}, "", 0},
      {{1, 3, 9, 11}, {3, 2}, {2, 3}, {1, 0, 2, 1}, {}, "", 1},  // ceil mode
      {{1, 4, 10, 7}, {3, 3}, {2, 2}, {}, {}, "SAME_UPPER", 0},
      {{1, 4, 10, 7}, {2, 3}, {3, 2}, {}, {}, "SAME_LOWER", 0},
      {{1, 3, 12, 12}, {2, 2}, {1, 1}, {}, {2, 3}, "", 0},  // dilated, no pads
      {{2, 3, 17}, {4}, {3}, {1, 2}, {}, "", 0},            // 1-D
      {{1, 2, 6, 7, 5}, {2, 3, 2}, {2, 2, 1}, {1, 1, 0, 0, 1, 1}, {}, "", 0},  // 3-D
      {{1, 2, 8, 8}, {3, 3}, {3, 3}, {}, {}, "VALID", 1},
  };
  uint32_t seed = 800;
  for (const Case& c : cases) {
    const Tensor x = random_f32(c.x, seed++);
    Attributes a;
    a.set("kernel_shape", c.kernel);
    if (!c.strides.empty()) a.set("strides", c.strides);
    if (!c.pads.empty()) a.set("pads", c.pads);
    if (!c.dilations.empty()) a.set("dilations", c.dilations);
    if (!c.auto_pad.empty()) a.set("auto_pad", c.auto_pad);
    if (c.ceil_mode) a.set("ceil_mode", c.ceil_mode);
    const std::string what = dims_str(c.x) + " k" + dims_str(c.kernel);
    check("onednn_maxpool", Op::MaxPool, a, {&x}, {false}, 0.0, what);
    check("onednn_avgpool", Op::AveragePool, a, {&x}, {false}, 1e-6, what + " exclude pad");
    if (!c.ceil_mode) {
      Attributes inc = a;
      inc.set("count_include_pad", int64_t{1});
      check("onednn_avgpool", Op::AveragePool, inc, {&x}, {false}, 1e-6, what + " include pad");
    }
  }
}

TEST(FastOnednnPool, GlobalPools) {
  uint32_t seed = 900;
  for (const Dims& d : {Dims{1, 2048, 7, 7}, Dims{2, 3, 5}, Dims{1, 4, 3, 4, 5}, Dims{3, 17, 1, 1}}) {
    const Tensor x = random_f32(d, seed++);
    const Attributes none;
    check("onednn_globalavgpool", Op::GlobalAveragePool, none, {&x}, {false}, 1e-6, dims_str(d));
    check("onednn_globalmaxpool", Op::GlobalMaxPool, none, {&x}, {false}, 0.0, dims_str(d));
  }
}

TEST(FastOnednnPool, RejectsWhatItCannotRun) {
  const Tensor x = random_f32({1, 2, 8, 8}, 1);
  Attributes a;
  a.set("kernel_shape", Ints{2, 2});
  EXPECT_TRUE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &a, {&x}, {kF32})));
  // The Indices output.
  EXPECT_FALSE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &a, {&x}, {kF32, DataType::kInt64})));
  // Non-float32.
  const Tensor x64 = cast_tensor(x, DataType::kFloat64);
  EXPECT_FALSE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &a, {&x64}, {DataType::kFloat64})));
  const Tensor xi = cast_tensor(x, DataType::kInt32);
  EXPECT_FALSE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &a, {&xi}, {DataType::kInt32})));
  // ceil_mode with count_include_pad.
  Attributes ci = a;
  ci.set("ceil_mode", int64_t{1});
  ci.set("count_include_pad", int64_t{1});
  EXPECT_FALSE(tactic_supports("onednn_avgpool", make_spec(Op::AveragePool, &ci, {&x}, {kF32})));
  // Dilation with padding; padding as large as the window.
  Attributes dp = a;
  dp.set("dilations", Ints{2, 2});
  dp.set("pads", Ints{1, 1, 1, 1});
  EXPECT_FALSE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &dp, {&x}, {kF32})));
  Attributes big = a;
  big.set("pads", Ints{2, 0, 0, 0});
  EXPECT_FALSE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &big, {&x}, {kF32})));
  // No kernel_shape.
  const Attributes none;
  EXPECT_FALSE(tactic_supports("onednn_maxpool", make_spec(Op::MaxPool, &none, {&x}, {kF32})));
  // LpPool is not this family's.
  for (const Tactic* t : kiln::fast::tactics_for(make_spec(Op::LpPool, &a, {&x}, {kF32}))) {
    EXPECT_NE(std::string(t->name).rfind("onednn", 0), 0u) << t->name;
  }
}

}  // namespace
}  // namespace kiln::testing::fast
