// CUDA Attention kernel (kiln_cuda_attention) against the CPU reference kernel: 3-D and 4-D
// layouts, grouped-query heads, boolean and additive masks (broadcast, short key axis),
// causal and window masking, softcap, explicit scale, fully masked rows, BERT / GPT-2 /
// ViT shapes, in float32, float16 and bfloat16. Low-precision runs compare with the
// float32 reference on the rounded inputs.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

// cuda_test_util.h names TensorShape unqualified; declare it first (harmless if the header
// gets its own using-declaration).
#include "backends/cpu/fast/fast_kernel.h"
namespace kiln::testing::gpu {
using kiln::fast::TensorShape;
}  // namespace kiln::testing::gpu

#include "cuda_test_util.h"

namespace kiln::testing::gpu {
namespace {

uint32_t fresh_seed() {
  static std::mt19937 gen(std::random_device{}());
  return gen();
}

struct Case {
  std::string name;
  Dims q, k, v;
  Dims mask;  // empty: none
  DataType mask_dt = DataType::kFloat32;
  Attributes attrs;
  bool mask_full_rows = false;  // also mask every key of some rows (bool masks)
};

Attributes heads(int64_t qh, int64_t kvh) {
  Attributes a;
  a.set("q_num_heads", qh);
  a.set("kv_num_heads", kvh);
  return a;
}

Attributes with(Attributes a, const std::string& name, int64_t v) {
  a.set(name, v);
  return a;
}
Attributes withf(Attributes a, const std::string& name, float v) {
  a.set(name, v);
  return a;
}

Tensor make_mask(const Dims& dims, DataType dt, uint32_t seed, bool full_rows) {
  std::mt19937 gen(seed);
  if (dt == DataType::kBool) {
    Tensor m(DataType::kBool, dims);
    std::bernoulli_distribution keep(0.7);
    for (int64_t i = 0; i < m.size(); ++i) m.data<bool>()[i] = keep(gen);
    if (full_rows && !dims.empty()) {
      const int64_t last = dims.back();
      for (int64_t i = 0; i < last && i < m.size(); ++i) m.data<bool>()[i] = false;  // first row
      if (m.size() >= 3 * last) {
        for (int64_t i = 2 * last; i < 3 * last; ++i) m.data<bool>()[i] = false;  // third row
      }
    }
    return m;
  }
  Tensor m = random_f32(dims, seed, 0.1f, 3.0f);
  std::bernoulli_distribution drop(0.2);
  for (int64_t i = 0; i < m.size(); ++i) {
    if (drop(gen)) m.data<float>()[i] = -std::numeric_limits<float>::infinity();
  }
  if (full_rows && !dims.empty()) {
    for (int64_t i = 0; i < dims.back() && i < m.size(); ++i) m.data<float>()[i] = -std::numeric_limits<float>::infinity();
  }
  return m;
}

double tol_for(DataType dt) { return dt == DataType::kFloat32 ? 1e-4 : dt == DataType::kFloat16 ? 2e-2 : 5e-2; }

void check(const Case& c, DataType dt) {
  const uint32_t seed = fresh_seed();
  const std::string what = cat(c.name, " ", dtype_name(dt), " seed ", seed);
  // Moderate magnitudes keep scores in a range where low-precision rounding stays small.
  const float hi = dt == DataType::kFloat32 ? 2.0f : 1.0f;
  const Tensor q32 = random_f32(c.q, seed, 0.25f, hi), k32 = random_f32(c.k, seed + 1, 0.25f, hi),
               v32 = random_f32(c.v, seed + 2, 0.25f, 2.0f);
  Tensor q = q32.clone(), k = k32.clone(), v = v32.clone();
  Tensor qr = q32.clone(), kr = k32.clone(), vr = v32.clone();
  if (dt != DataType::kFloat32) {
    q = convert(q32, dt);
    k = convert(k32, dt);
    v = convert(v32, dt);
    qr = to_f32(q);
    kr = to_f32(k);
    vr = to_f32(v);
  }
  Tensor mask;
  std::vector<const Tensor*> ins = {&q, &k, &v}, ref_ins = {&qr, &kr, &vr};
  if (!c.mask.empty()) {
    mask = make_mask(c.mask, c.mask_dt, seed + 3, c.mask_full_rows);
    ins.push_back(&mask);
    ref_ins.push_back(&mask);
  }
  const std::vector<Tensor> ref = run_ref(Op::Attention, c.attrs, ref_ins);
  ASSERT_EQ(ref.size(), 1u) << what;
  const kiln::cuda::LayerSpec spec = make_cuda_spec(Op::Attention, &c.attrs, ins, {dt});
  CudaRun r = run_cuda("kiln_cuda_attention", spec, ins, {{dt, ref[0].dims()}});
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  const Tensor got = dt == DataType::kFloat32 ? r.outputs[0].clone() : to_f32(r.outputs[0]);
  expect_near_tensor(got, ref[0], tol_for(dt), what);
}

std::vector<Case> common_cases() {
  std::vector<Case> cases;
  const Attributes none;
  const Attributes causal = with(none, "is_causal", 1);
  cases.push_back({"bert 4d", {1, 12, 128, 64}, {1, 12, 128, 64}, {1, 12, 128, 64}, {}, DataType::kFloat32, none});
  cases.push_back({"bert 3d + [B,1,1,S] mask", {2, 128, 768}, {2, 128, 768}, {2, 128, 768}, {2, 1, 1, 128},
                   DataType::kFloat32, heads(12, 12)});
  cases.push_back({"gpt2 causal 3d", {1, 128, 768}, {1, 128, 768}, {1, 128, 768}, {}, DataType::kFloat32,
                   with(heads(12, 12), "is_causal", 1)});
  cases.push_back({"vit S=197", {1, 12, 197, 64}, {1, 12, 197, 64}, {1, 12, 197, 64}, {}, DataType::kFloat32, none});
  cases.push_back({"S=1", {2, 4, 1, 64}, {2, 4, 1, 64}, {2, 4, 1, 64}, {}, DataType::kFloat32, none});
  cases.push_back({"S=1 causal", {2, 1, 4 * 32}, {2, 1, 4 * 32}, {2, 1, 4 * 32}, {}, DataType::kFloat32,
                   with(heads(4, 4), "is_causal", 1)});
  cases.push_back({"4d gqa", {2, 8, 19, 16}, {2, 2, 19, 16}, {2, 2, 19, 16}, {}, DataType::kFloat32, none});
  cases.push_back({"3d gqa", {1, 9, 64}, {1, 21, 32}, {1, 21, 32}, {}, DataType::kFloat32, heads(4, 2)});
  cases.push_back({"cross lq<l, dv!=dk", {2, 3, 5, 24}, {2, 3, 70, 24}, {2, 3, 70, 40}, {}, DataType::kFloat32, none});
  cases.push_back({"odd sizes", {1, 1, 3, 7}, {1, 1, 5, 7}, {1, 1, 5, 3}, {}, DataType::kFloat32, none});
  cases.push_back({"causal", {1, 2, 45, 16}, {1, 2, 45, 16}, {1, 2, 45, 16}, {}, DataType::kFloat32, causal});
  cases.push_back({"causal lq<l", {1, 2, 6, 16}, {1, 2, 30, 16}, {1, 2, 30, 16}, {}, DataType::kFloat32, causal});
  cases.push_back({"causal long", {1, 2, 200, 32}, {1, 2, 200, 32}, {1, 2, 200, 32}, {}, DataType::kFloat32, causal});
  cases.push_back({"float mask", {2, 2, 17, 8}, {2, 2, 23, 8}, {2, 2, 23, 8}, {2, 1, 17, 23}, DataType::kFloat32, none});
  cases.push_back({"bool mask", {2, 3, 70, 32}, {2, 3, 90, 32}, {2, 3, 90, 32}, {2, 3, 70, 90}, DataType::kBool, none});
  cases.push_back({"bool mask 2d", {1, 2, 9, 16}, {1, 2, 11, 16}, {1, 2, 11, 16}, {9, 11}, DataType::kBool, none});
  cases.push_back({"short mask key axis", {1, 2, 9, 16}, {1, 2, 80, 16}, {1, 2, 80, 16}, {1, 1, 9, 70},
                   DataType::kFloat32, none});
  cases.push_back({"rank-1 mask", {1, 2, 9, 16}, {1, 2, 11, 16}, {1, 2, 11, 16}, {11}, DataType::kFloat32, none});
  cases.push_back({"mask + causal", {1, 2, 33, 16}, {1, 2, 33, 16}, {1, 2, 33, 16}, {1, 2, 33, 33}, DataType::kBool,
                   causal});
  Case full{"fully masked rows", {1, 2, 9, 16}, {1, 2, 12, 16}, {1, 2, 12, 16}, {1, 1, 9, 12}, DataType::kBool, none};
  full.mask_full_rows = true;
  cases.push_back(full);
  Case fullf{"fully masked rows (float -inf)", {1, 2, 9, 16}, {1, 2, 12, 16}, {1, 2, 12, 16}, {1, 1, 9, 12},
             DataType::kFloat32, none};
  fullf.mask_full_rows = true;
  cases.push_back(fullf);
  cases.push_back({"explicit scale", {1, 2, 10, 16}, {1, 2, 12, 16}, {1, 2, 12, 16}, {}, DataType::kFloat32,
                   withf(none, "scale", 0.3f)});
  cases.push_back({"softcap", {1, 2, 40, 32}, {1, 2, 40, 32}, {1, 2, 40, 32}, {}, DataType::kFloat32,
                   withf(none, "softcap", 2.0f)});
  cases.push_back({"window", {1, 2, 100, 16}, {1, 2, 100, 16}, {1, 2, 100, 16}, {}, DataType::kFloat32,
                   with(with(none, "left_window_size", 5), "right_window_size", 0)});
  cases.push_back({"window both sides", {1, 1, 90, 16}, {1, 1, 90, 16}, {1, 1, 90, 16}, {}, DataType::kFloat32,
                   with(with(none, "left_window_size", 70), "right_window_size", 3)});
  cases.push_back({"head 128", {1, 2, 70, 128}, {1, 2, 70, 128}, {1, 2, 70, 128}, {}, DataType::kFloat32, causal});
  cases.push_back({"head 80 (3d)", {1, 33, 3 * 80}, {1, 33, 3 * 80}, {1, 33, 3 * 80}, {},
                   DataType::kFloat32, heads(3, 3)});
  cases.push_back({"L=0 keys", {1, 1, 4, 8}, {1, 1, 0, 8}, {1, 1, 0, 8}, {}, DataType::kFloat32, none});
  return cases;
}

TEST(CudaAttention, Float32MatchesReference) {
  KILN_REQUIRE_GPU();
  for (const Case& c : common_cases()) check(c, DataType::kFloat32);
}

TEST(CudaAttention, Float16MatchesReference) {
  KILN_REQUIRE_GPU();
  for (const Case& c : common_cases()) check(c, DataType::kFloat16);
}

TEST(CudaAttention, BFloat16MatchesReference) {
  KILN_REQUIRE_GPU();
  for (const Case& c : common_cases()) check(c, DataType::kBFloat16);
}

TEST(CudaAttention, Float16MaskDtype) {
  KILN_REQUIRE_GPU();
  // A float16 additive mask with float16 Q/K/V (the mask is rounded like the reference's).
  const uint32_t seed = fresh_seed();
  Tensor q = convert(random_f32({1, 2, 20, 32}, seed, 0.25f, 1.0f), DataType::kFloat16);
  Tensor k = convert(random_f32({1, 2, 20, 32}, seed + 1, 0.25f, 1.0f), DataType::kFloat16);
  Tensor v = convert(random_f32({1, 2, 20, 32}, seed + 2), DataType::kFloat16);
  Tensor m = convert(random_f32({1, 1, 20, 20}, seed + 3), DataType::kFloat16);
  Tensor qr = to_f32(q), kr = to_f32(k), vr = to_f32(v), mr = to_f32(m);
  const Attributes none;
  const std::vector<Tensor> ref = run_ref(Op::Attention, none, {&qr, &kr, &vr, &mr});
  std::vector<const Tensor*> ins = {&q, &k, &v, &m};
  CudaRun r = run_cuda("kiln_cuda_attention", make_cuda_spec(Op::Attention, &none, ins, {DataType::kFloat16}), ins,
                       {{DataType::kFloat16, ref[0].dims()}});
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_near_tensor(to_f32(r.outputs[0]), ref[0], 2e-2, cat("fp16 mask seed ", seed));
}

TEST(CudaAttention, EmptyIsNoOp) {
  KILN_REQUIRE_GPU();
  Tensor q(DataType::kFloat32, {0, 2, 5, 8}), k(DataType::kFloat32, {0, 2, 5, 8}), v(DataType::kFloat32, {0, 2, 5, 8});
  const Attributes none;
  std::vector<const Tensor*> ins = {&q, &k, &v};
  CudaRun r = run_cuda("kiln_cuda_attention", make_cuda_spec(Op::Attention, &none, ins, {DataType::kFloat32}), ins,
                       {{DataType::kFloat32, {0, 2, 5, 8}}});
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
}

TEST(CudaAttention, RejectsWhatItCannotDo) {
  KILN_REQUIRE_GPU();
  const auto supports = [](const kiln::cuda::LayerSpec& s) {
    const kiln::cuda::Tactic* t = cuda_tactic_for("kiln_cuda_attention", s.op);
    return t && t->supports(s);
  };
  Tensor q = random_f32({1, 2, 4, 8}, 1), k = random_f32({1, 2, 4, 8}, 2), v = random_f32({1, 2, 4, 8}, 3);
  Tensor past = random_f32({1, 2, 3, 8}, 4);
  const Attributes none;
  EXPECT_TRUE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v}, {DataType::kFloat32})));
  // KV cache.
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v, nullptr, &past, &past}, {DataType::kFloat32})));
  // present_key wanted.
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v},
                                       {DataType::kFloat32, DataType::kFloat32, DataType::kFloat32})));
  // qk_matmul_output wanted.
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v},
                                       {DataType::kFloat32, DataType::kUndefined, DataType::kUndefined,
                                        DataType::kFloat32})));
  // Omitted extra outputs are fine.
  EXPECT_TRUE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v},
                                      {DataType::kFloat32, DataType::kUndefined, DataType::kUndefined,
                                       DataType::kUndefined})));
  // Integer mask, mixed dtypes.
  Tensor im(DataType::kInt64, {4, 4});
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v, &im}, {DataType::kFloat32})));
  Tensor v16 = convert(v, DataType::kFloat16);
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v16}, {DataType::kFloat32})));
  // softmax_precision float16 with float32 inputs.
  Attributes sp;
  sp.set("softmax_precision", int64_t{10});
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &sp, {&q, &k, &v}, {DataType::kFloat32})));
  // Head size over 128 fails prepare cleanly.
  Tensor qb = random_f32({1, 1, 4, 160}, 5);
  std::vector<const Tensor*> ins = {&qb, &qb, &qb};
  CudaRun r = run_cuda("kiln_cuda_attention", make_cuda_spec(Op::Attention, &none, ins, {DataType::kFloat32}), ins,
                       {{DataType::kFloat32, {1, 1, 4, 160}}});
  EXPECT_FALSE(r.status.is_ok());
}

}  // namespace
}  // namespace kiln::testing::gpu
