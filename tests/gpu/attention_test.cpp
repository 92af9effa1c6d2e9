// CUDA Attention kernels (kiln_cuda_attention, and kiln_cuda_flash for float16/bfloat16)
// against the CPU reference kernel: 3-D and 4-D layouts, grouped-query heads, boolean and
// additive masks (broadcast, short key axis), causal and window masking, softcap, explicit
// scale, fully masked rows, BERT / GPT-2 / ViT shapes, in float32, float16 and bfloat16.
// Low-precision runs compare with the float32 reference on the rounded inputs.
#include <cstdio>
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

constexpr const char* kAttn = "kiln_cuda_attention";
constexpr const char* kFlash = "kiln_cuda_flash";

// The tactics that run `dt` (the flash kernel is float16/bfloat16 only; the WMMA kernel is
// no candidate for bfloat16 layers the flash kernel takes: RejectsWhatItCannotDo).
std::vector<const char*> tactics_for(DataType dt) {
  if (dt == DataType::kFloat32) return {kAttn};
  if (dt == DataType::kBFloat16) return {kFlash};
  return {kAttn, kFlash};
}

struct Case {
  std::string name;
  Dims q, k, v;
  Dims mask;  // empty: none
  DataType mask_dt = DataType::kFloat32;
  Attributes attrs;
  bool mask_full_rows = false;  // also mask every key of some rows
  bool fixed_seed = false;      // seed from the name (else a fresh one, printed on failure)
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
  return dt == DataType::kFloat32 ? m : convert(m, dt);
}

double tol_for(DataType dt) { return dt == DataType::kFloat32 ? 1e-4 : dt == DataType::kFloat16 ? 2e-2 : 5e-2; }

// Runs case `c` in `dt` on every tactic for `dt` against one reference run.
void check(const Case& c, DataType dt) {
  const uint32_t seed = c.fixed_seed ? seed_for(c.name) : fresh_seed();
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
  Tensor mask, mask_ref;
  std::vector<const Tensor*> ins = {&q, &k, &v}, ref_ins = {&qr, &kr, &vr};
  if (!c.mask.empty()) {
    mask = make_mask(c.mask, c.mask_dt, seed + 3, c.mask_full_rows);
    mask_ref = c.mask_dt == DataType::kBool ? mask.clone() : to_f32(mask);
    ins.push_back(&mask);
    ref_ins.push_back(&mask_ref);
  }
  const std::vector<Tensor> ref = run_ref(Op::Attention, c.attrs, ref_ins);
  ASSERT_EQ(ref.size(), 1u) << c.name;
  const kiln::cuda::LayerSpec spec = make_cuda_spec(Op::Attention, &c.attrs, ins, {dt});
  for (const char* tactic : tactics_for(dt)) {
    const std::string what = cat(c.name, " ", dtype_name(dt), " ", tactic, " seed ", seed);
    CudaRun r = run_cuda(tactic, spec, ins, {{dt, ref[0].dims()}});
    ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
    const Tensor got = dt == DataType::kFloat32 ? r.outputs[0].clone() : to_f32(r.outputs[0]);
    expect_near_tensor(got, ref[0], tol_for(dt), what);
  }
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

// Shapes at the flash kernel's edges: partial query/key tiles, 1/2/4-warp blocks (by grid
// size), Lq != L with and without causal masking, Dk != Dv, padded head sizes, GQA, masks of
// every kind, fully masked rows, softcap, windows, unaligned (scalar-load) head sizes.
std::vector<Case> edge_cases() {
  std::vector<Case> cases;
  const Attributes none;
  const Attributes causal = with(none, "is_causal", 1);
  const DataType f16 = DataType::kFloat16, f32 = DataType::kFloat32, bf16 = DataType::kBFloat16, b8 = DataType::kBool;
  auto add = [&](Case c) {
    c.fixed_seed = true;
    cases.push_back(std::move(c));
  };
  add({"bert B=1 4d fp16 mask [B,1,1,S]", {1, 12, 128, 64}, {1, 12, 128, 64}, {1, 12, 128, 64}, {1, 1, 1, 128}, f16, none});
  add({"bert B=2 3d fp16 mask [B,1,1,S]", {2, 128, 768}, {2, 128, 768}, {2, 128, 768}, {2, 1, 1, 128}, f16,
       heads(12, 12)});
  add({"bert B=8 (2-warp blocks) bf16 mask", {8, 12, 128, 64}, {8, 12, 128, 64}, {8, 12, 128, 64}, {8, 1, 1, 128}, bf16,
       none});
  add({"bert B=16 (4-warp blocks) fp16 mask", {16, 12, 128, 64}, {16, 12, 128, 64}, {16, 12, 128, 64}, {16, 1, 1, 128},
       f16, none});
  add({"gpt2 B=16 causal (4-warp blocks)", {16, 128, 768}, {16, 128, 768}, {16, 128, 768}, {}, f32,
       with(heads(12, 12), "is_causal", 1)});
  add({"S=77", {1, 12, 77, 64}, {1, 12, 77, 64}, {1, 12, 77, 64}, {}, f32, none});
  add({"vit S=197 B=2 3d", {2, 197, 768}, {2, 197, 768}, {2, 197, 768}, {}, f32, heads(12, 12)});
  add({"lq<l", {1, 4, 40, 64}, {1, 4, 150, 64}, {1, 4, 150, 64}, {}, f32, none});
  add({"lq>l", {1, 4, 150, 32}, {1, 4, 40, 32}, {1, 4, 40, 32}, {}, f32, none});
  add({"causal lq<l", {1, 4, 37, 64}, {1, 4, 130, 64}, {1, 4, 130, 64}, {}, f32, causal});
  add({"causal lq>l", {1, 4, 130, 64}, {1, 4, 37, 64}, {1, 4, 37, 64}, {}, f32, causal});
  add({"dk 64 dv 32", {2, 4, 70, 64}, {2, 4, 90, 64}, {2, 4, 90, 32}, {}, f32, none});
  add({"dk 32 dv 64 causal", {2, 4, 70, 32}, {2, 4, 90, 32}, {2, 4, 90, 64}, {}, f32, causal});
  add({"head 80", {1, 4, 100, 80}, {1, 4, 100, 80}, {1, 4, 100, 80}, {}, f32, none});
  add({"head 96 causal", {1, 2, 70, 96}, {1, 2, 70, 96}, {1, 2, 70, 96}, {}, f32, causal});
  add({"head 112 3d", {1, 50, 2 * 112}, {1, 66, 2 * 112}, {1, 66, 2 * 112}, {}, f32, heads(2, 2)});
  add({"head 48 mask", {2, 3, 33, 48}, {2, 3, 65, 48}, {2, 3, 65, 48}, {2, 3, 33, 65}, f32, none});
  add({"head 20 (scalar loads)", {1, 3, 70, 20}, {1, 3, 70, 20}, {1, 3, 70, 20}, {}, f32, causal});
  add({"head 8 dv 12 (scalar loads)", {2, 2, 19, 8}, {2, 2, 75, 8}, {2, 2, 75, 12}, {}, f32, none});
  add({"gqa 8/2", {2, 8, 100, 64}, {2, 2, 100, 64}, {2, 2, 100, 64}, {}, f32, none});
  add({"gqa 8/2 causal 3d mask", {2, 100, 8 * 64}, {2, 100, 2 * 64}, {2, 100, 2 * 64}, {2, 8, 100, 100}, b8,
       with(heads(8, 2), "is_causal", 1)});
  Case full16{"fully masked row (fp16 mask)", {1, 2, 77, 64}, {1, 2, 77, 64}, {1, 2, 77, 64}, {1, 1, 77, 77}, f16, none};
  full16.mask_full_rows = true;
  add(full16);
  Case fullb{"fully masked rows (bool, 2 key tiles)", {1, 2, 70, 64}, {1, 2, 130, 64}, {1, 2, 130, 64}, {1, 2, 70, 130},
             b8, none};
  fullb.mask_full_rows = true;
  add(fullb);
  Case fullbatch{"fully masked batch ([B,1,1,S] mask)", {2, 4, 50, 32}, {2, 4, 50, 32}, {2, 4, 50, 32}, {2, 1, 1, 50},
                 f16, none};
  fullbatch.mask_full_rows = true;  // every key of batch 0
  add(fullbatch);
  add({"short mask key axis, 5 key tiles", {1, 2, 40, 64}, {1, 2, 300, 64}, {1, 2, 300, 64}, {1, 1, 40, 250}, f32, none});
  add({"per-head mask", {2, 4, 65, 32}, {2, 4, 65, 32}, {2, 4, 65, 32}, {1, 4, 65, 65}, f32, none});
  add({"bf16 mask + causal", {1, 4, 90, 64}, {1, 4, 90, 64}, {1, 4, 90, 64}, {1, 1, 90, 90}, bf16, causal});
  add({"softcap causal", {1, 4, 100, 64}, {1, 4, 100, 64}, {1, 4, 100, 64}, {}, f32,
       withf(causal, "softcap", 5.0f)});
  add({"softcap + mask", {2, 128, 256}, {2, 128, 256}, {2, 128, 256}, {2, 1, 1, 128}, f16,
       withf(heads(4, 4), "softcap", 3.0f)});
  add({"window", {1, 4, 200, 64}, {1, 4, 200, 64}, {1, 4, 200, 64}, {}, f32,
       with(with(none, "left_window_size", 30), "right_window_size", 10)});
  add({"window left + causal + mask", {1, 2, 150, 32}, {1, 2, 150, 32}, {1, 2, 150, 32}, {1, 1, 150, 150}, f32,
       with(causal, "left_window_size", 70)});
  add({"window right only, lq<l", {1, 2, 50, 64}, {1, 2, 200, 64}, {1, 2, 200, 64}, {}, f32,
       with(none, "right_window_size", 66)});
  add({"explicit scale", {1, 4, 70, 64}, {1, 4, 70, 64}, {1, 4, 70, 64}, {}, f32, withf(none, "scale", 0.05f)});
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

TEST(CudaAttention, Float16EdgeCases) {
  KILN_REQUIRE_GPU();
  for (const Case& c : edge_cases()) check(c, DataType::kFloat16);
}

TEST(CudaAttention, BFloat16EdgeCases) {
  KILN_REQUIRE_GPU();
  for (const Case& c : edge_cases()) check(c, DataType::kBFloat16);
}

TEST(CudaAttention, Float32EdgeCases) {
  KILN_REQUIRE_GPU();
  for (const Case& c : edge_cases()) check(c, DataType::kFloat32);
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
  for (const char* tactic : tactics_for(DataType::kFloat16)) {
    CudaRun r = run_cuda(tactic, make_cuda_spec(Op::Attention, &none, ins, {DataType::kFloat16}), ins,
                         {{DataType::kFloat16, ref[0].dims()}});
    ASSERT_TRUE(r.status.is_ok()) << tactic << ": " << r.status.message();
    expect_near_tensor(to_f32(r.outputs[0]), ref[0], 2e-2, cat("fp16 mask ", tactic, " seed ", seed));
  }
}

TEST(CudaAttention, EmptyIsNoOp) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    Tensor q(dt, {0, 2, 5, 8}), k(dt, {0, 2, 5, 8}), v(dt, {0, 2, 5, 8});
    const Attributes none;
    std::vector<const Tensor*> ins = {&q, &k, &v};
    for (const char* tactic : tactics_for(dt)) {
      CudaRun r = run_cuda(tactic, make_cuda_spec(Op::Attention, &none, ins, {dt}), ins, {{dt, {0, 2, 5, 8}}});
      ASSERT_TRUE(r.status.is_ok()) << tactic << ": " << r.status.message();
    }
  }
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

  // The flash kernel: float16/bfloat16 only, head sizes up to 128, same layer limits.
  const auto flash_supports = [](const kiln::cuda::LayerSpec& s) {
    const kiln::cuda::Tactic* t = cuda_tactic_for(kFlash, s.op);
    return t && t->supports(s);
  };
  EXPECT_FALSE(flash_supports(make_cuda_spec(Op::Attention, &none, {&q, &k, &v}, {DataType::kFloat32})));
  Tensor q16 = convert(q, DataType::kFloat16), k16 = convert(k, DataType::kFloat16);
  Tensor qbf = convert(q, DataType::kBFloat16), kbf = convert(k, DataType::kBFloat16), vbf = convert(v, DataType::kBFloat16);
  EXPECT_TRUE(flash_supports(make_cuda_spec(Op::Attention, &none, {&q16, &k16, &v16}, {DataType::kFloat16})));
  EXPECT_TRUE(flash_supports(make_cuda_spec(Op::Attention, &none, {&qbf, &kbf, &vbf}, {DataType::kBFloat16})));
  EXPECT_FALSE(supports(make_cuda_spec(Op::Attention, &none, {&qbf, &kbf, &vbf}, {DataType::kBFloat16})));
  EXPECT_FALSE(flash_supports(make_cuda_spec(Op::Attention, &none, {&q16, &k16, &vbf}, {DataType::kFloat16})));
  Tensor past16 = convert(past, DataType::kFloat16);
  EXPECT_FALSE(flash_supports(
      make_cuda_spec(Op::Attention, &none, {&q16, &k16, &v16, nullptr, &past16, &past16}, {DataType::kFloat16})));
  Tensor qb16 = convert(qb, DataType::kFloat16);
  std::vector<const Tensor*> ins16 = {&qb16, &qb16, &qb16};
  CudaRun r16 = run_cuda(kFlash, make_cuda_spec(Op::Attention, &none, ins16, {DataType::kFloat16}), ins16,
                         {{DataType::kFloat16, {1, 1, 4, 160}}});
  EXPECT_FALSE(r16.status.is_ok());
}

// Speed of both tactics at BERT-base, ViT-B/16 and GPT-2 small shapes (prints, never
// asserts; run with --gtest_also_run_disabled_tests).
TEST(CudaAttention, DISABLED_Timing) {
  KILN_REQUIRE_GPU();
  struct Shape {
    const char* name;
    int64_t S;
    bool mask, causal;
  };
  const Shape shapes[] = {{"BERT-base S=128 + [B,1,1,S] fp16 mask", 128, true, false},
                          {"ViT-B/16 S=197", 197, false, false},
                          {"GPT-2 S=128 causal", 128, false, true}};
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    for (const Shape& sh : shapes) {
      for (int64_t B : {int64_t{1}, int64_t{64}}) {
        const Dims d = {B, 12, sh.S, 64};
        Tensor q = convert(random_f32(d, 1, 0.25f, 1.0f), dt), k = convert(random_f32(d, 2, 0.25f, 1.0f), dt),
               v = convert(random_f32(d, 3), dt);
        Tensor m = make_mask({B, 1, 1, sh.S}, DataType::kFloat16, 4, false);
        std::vector<const Tensor*> ins = {&q, &k, &v};
        if (sh.mask) ins.push_back(&m);
        const Attributes at = sh.causal ? with(Attributes{}, "is_causal", 1) : Attributes{};
        std::printf("%-40s %s B=%-3lld", sh.name, dtype_name(dt), static_cast<long long>(B));
        for (const char* tactic : {kAttn, kFlash}) {
          std::printf("  %s %8.2f us", tactic, 1000.0 * time_layer_ms(tactic, Op::Attention, at, ins, {dt, d}));
        }
        std::printf("\n");
      }
    }
  }
}

}  // namespace
}  // namespace kiln::testing::gpu
