// Fast Attention kernel (kiln_attention) against the reference kernel: 3-D and 4-D
// layouts, grouped-query heads, masks (additive float, boolean, short key axis), causal
// and window masking, explicit scale, fully masked rows.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fast_kernel_test_util.h"

namespace kiln::testing::fast {
namespace {

struct Case {
  std::string name;
  Dims q, k, v;
  Dims mask;  // empty: none
  DataType mask_dt = DataType::kFloat32;
  Attributes attrs;
};

Attributes heads(int64_t qh, int64_t kvh) {
  Attributes a;
  a.set("q_num_heads", qh);
  a.set("kv_num_heads", kvh);
  return a;
}

Tensor make_mask(const Dims& dims, DataType dt, uint32_t seed) {
  std::mt19937 gen(seed);
  if (dt == DataType::kBool) {
    Tensor m(DataType::kBool, dims);
    std::bernoulli_distribution keep(0.7);
    for (int64_t i = 0; i < m.size(); ++i) m.data<bool>()[i] = keep(gen);
    return m;
  }
  Tensor m = random_f32(dims, seed, 0.1f, 3.0f);
  std::bernoulli_distribution drop(0.2);
  for (int64_t i = 0; i < m.size(); ++i) {
    if (drop(gen)) m.data<float>()[i] = -std::numeric_limits<float>::infinity();
  }
  return m;
}

void check(const Case& c, double tol = 1e-4) {
  const uint32_t seed = fresh_seed();
  const Tensor q = random_f32(c.q, seed), k = random_f32(c.k, seed + 1), v = random_f32(c.v, seed + 2);
  Tensor mask;
  std::vector<const Tensor*> ins = {&q, &k, &v};
  if (!c.mask.empty()) {
    mask = make_mask(c.mask, c.mask_dt, seed + 3);
    ins.push_back(&mask);
  }
  const std::vector<Tensor> ref = run_ref(Op::Attention, c.attrs, ins);
  LayerSpec spec = make_spec(Op::Attention, &c.attrs, ins, {DataType::kFloat32});
  FastRun r = run_fast("kiln_attention", spec, ins, shapes_of(ref));
  ASSERT_TRUE(r.status.is_ok()) << c.name << ": " << r.status.message();
  expect_near_tensor(r.outputs[0], ref[0], tol, cat(c.name, " seed ", seed));
}

TEST(FastAttention, MatchesReference) {
  std::vector<Case> cases;
  cases.push_back({"3d", {2, 37, 48}, {2, 37, 48}, {2, 37, 48}, {}, DataType::kFloat32, heads(3, 3)});
  cases.push_back({"4d", {1, 4, 50, 32}, {1, 4, 50, 32}, {1, 4, 50, 32}, {}, DataType::kFloat32, {}});
  cases.push_back({"4d gqa", {2, 8, 19, 16}, {2, 2, 19, 16}, {2, 2, 19, 16}, {}, DataType::kFloat32, {}});
  cases.push_back({"3d gqa", {1, 9, 64}, {1, 21, 32}, {1, 21, 32}, {}, DataType::kFloat32, heads(4, 2)});
  cases.push_back({"cross lq<l, dv!=dk", {2, 3, 5, 24}, {2, 3, 70, 24}, {2, 3, 70, 40}, {}, DataType::kFloat32, {}});
  cases.push_back({"odd sizes", {1, 1, 3, 7}, {1, 1, 5, 7}, {1, 1, 5, 3}, {}, DataType::kFloat32, {}});
  Attributes causal;
  causal.set("is_causal", int64_t{1});
  cases.push_back({"causal", {1, 2, 45, 16}, {1, 2, 45, 16}, {1, 2, 45, 16}, {}, DataType::kFloat32, causal});
  cases.push_back({"causal lq<l", {1, 2, 6, 16}, {1, 2, 30, 16}, {1, 2, 30, 16}, {}, DataType::kFloat32, causal});
  cases.push_back({"float mask", {2, 2, 17, 8}, {2, 2, 23, 8}, {2, 2, 23, 8}, {2, 1, 17, 23}, DataType::kFloat32, {}});
  cases.push_back({"bool mask 2d", {2, 2, 17, 8}, {2, 2, 23, 8}, {2, 2, 23, 8}, {17, 23}, DataType::kBool, {}});
  cases.push_back({"short mask", {1, 2, 9, 8}, {1, 2, 20, 8}, {1, 2, 20, 8}, {1, 9, 12}, DataType::kFloat32, {}});
  cases.push_back({"mask 1d + causal", {1, 3, 20, 8}, {1, 3, 20, 8}, {1, 3, 20, 8}, {20}, DataType::kBool, causal});
  Attributes window;
  window.set("left_window_size", int64_t{3});
  window.set("right_window_size", int64_t{2});
  cases.push_back({"window", {1, 2, 40, 16}, {1, 2, 40, 16}, {1, 2, 40, 16}, {}, DataType::kFloat32, window});
  Attributes scaled = heads(2, 2);
  scaled.set("scale", 0.3f);
  cases.push_back({"scale", {2, 10, 32}, {2, 10, 32}, {2, 10, 32}, {}, DataType::kFloat32, scaled});
  cases.push_back({"bert", {1, 128, 768}, {1, 128, 768}, {1, 128, 768}, {}, DataType::kFloat32, heads(12, 12)});
  for (const Case& c : cases) check(c);
}

TEST(FastAttention, FullyMaskedRowsGiveZeros) {
  const uint32_t seed = fresh_seed();
  const Tensor q = random_f32({1, 2, 6, 8}, seed), k = random_f32({1, 2, 9, 8}, seed + 1), v = random_f32({1, 2, 9, 8}, seed + 2);
  Tensor mask(DataType::kBool, {6, 9});
  for (int64_t i = 0; i < mask.size(); ++i) mask.data<bool>()[i] = (i / 9) % 2 == 0 && i % 3 != 0;  // odd rows all false
  Attributes none;
  const std::vector<const Tensor*> ins = {&q, &k, &v, &mask};
  const std::vector<Tensor> ref = run_ref(Op::Attention, none, ins);
  FastRun r = run_fast("kiln_attention", make_spec(Op::Attention, &none, ins, {DataType::kFloat32}), ins, shapes_of(ref));
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_near_tensor(r.outputs[0], ref[0], 1e-4, "fully masked rows");
  EXPECT_EQ(r.outputs[0].data<float>()[8], 0.0f);  // row 1 of head 0
}

TEST(FastAttention, RejectsWhatItCannotDo) {
  const Tensor q = random_f32({1, 2, 4, 8}, 1);
  const Tensor h(DataType::kFloat16, {1, 2, 4, 8});
  const Tensor mi(DataType::kInt64, {4, 4});
  Attributes none;
  const std::vector<DataType> f32 = {DataType::kFloat32};
  EXPECT_TRUE(tactic_supports("kiln_attention", make_spec(Op::Attention, &none, {&q, &q, &q}, f32)));
  EXPECT_FALSE(tactic_supports("kiln_attention", make_spec(Op::Attention, &none, {&h, &h, &h}, {DataType::kFloat16})));
  EXPECT_FALSE(tactic_supports("kiln_attention", make_spec(Op::Attention, &none, {&q, &q, &q, &mi}, f32)));
  // KV cache, softcap, extra outputs, double softmax precision.
  EXPECT_FALSE(tactic_supports("kiln_attention", make_spec(Op::Attention, &none, {&q, &q, &q, nullptr, &q, &q}, f32)));
  Attributes softcap;
  softcap.set("softcap", 30.0f);
  EXPECT_FALSE(tactic_supports("kiln_attention", make_spec(Op::Attention, &softcap, {&q, &q, &q}, f32)));
  EXPECT_FALSE(tactic_supports("kiln_attention", make_spec(Op::Attention, &none, {&q, &q, &q},
                                                          {DataType::kFloat32, DataType::kUndefined, DataType::kUndefined,
                                                           DataType::kFloat32})));
  EXPECT_TRUE(tactic_supports("kiln_attention", make_spec(Op::Attention, &none, {&q, &q, &q},
                                                         {DataType::kFloat32, DataType::kUndefined})));
  Attributes sp;
  sp.set("softmax_precision", int64_t{11});
  EXPECT_FALSE(tactic_supports("kiln_attention", make_spec(Op::Attention, &sp, {&q, &q, &q}, f32)));
  // 3-D inputs without head counts fail prepare.
  const Tensor q3 = random_f32({1, 4, 16}, 2);
  LayerSpec spec = make_spec(Op::Attention, &none, {&q3, &q3, &q3}, f32);
  EXPECT_FALSE(run_fast("kiln_attention", spec, {&q3, &q3, &q3}, {{DataType::kFloat32, {1, 4, 16}}}).status.is_ok());
}

TEST(FastAttention, MicroTiming) {
  // B=1, S=128, H=12, D=64 (BERT-base), fast (1 and 2 threads) vs reference; printed only.
  const Tensor q = random_f32({1, 128, 768}, 1), k = random_f32({1, 128, 768}, 2), v = random_f32({1, 128, 768}, 3);
  const Attributes a = heads(12, 12);
  const std::vector<const Tensor*> ins = {&q, &k, &v};
  const std::vector<TensorShape> out = {{DataType::kFloat32, q.dims()}};
  const double t1 = time_fast_ms("kiln_attention", Op::Attention, a, ins, out, 1, 20);
  const double t2 = time_fast_ms("kiln_attention", Op::Attention, a, ins, out, 2, 20);
  const double tr = min_time_ms([&] { (void)run_ref(Op::Attention, a, ins); }, 2);
  std::printf("[ timing ] Attention B=1 S=128 H=12 D=64: fast %.3f ms (1 thread), %.3f ms (2 threads); reference %.3f ms\n",
              t1, t2, tr);
}

}  // namespace
}  // namespace kiln::testing::fast
