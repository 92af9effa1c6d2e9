// Fast elementwise kernels (kiln_elementwise, FusedElementwise) against the reference
// kernels: every op on random inputs of several shapes (odd sizes, broadcasting, sizes
// that use several threads), outputs pre-filled with NaN.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fast_kernel_test_util.h"

// Counting replacement of the global operator new (see count_allocations in
// fast_kernel_test_util.h): one definition for the whole test binary. It allocates with
// malloc, so tests that interpose malloc (engine_alloc_test.cpp) still see C++
// allocations; GCC cannot tell that this operator delete's free() matches, hence the pragma.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace kiln::testing::fast {

int64_t count_allocations(const std::function<void()>& f) {
  g_allocations = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_allocations.load();
}

namespace {

// Runs `op` fast and reference on `ins` and compares. constant[i] marks constant inputs.
void check(Op op, const Attributes& at, const std::vector<Tensor>& ins, const std::vector<bool>& constant, double tol,
           const std::string& what, const std::string& tactic = "kiln_elementwise") {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : ins) ptrs.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> ref = run_ref(op, at, ptrs);
  ASSERT_EQ(ref.size(), 1u) << what;
  LayerSpec spec = make_spec(op, &at, ptrs, {ref[0].dtype()}, constant);
  FastRun r = run_fast(tactic, spec, ptrs, shapes_of(ref));
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  expect_near_tensor(r.outputs[0], ref[0], tol, what);
}

const std::vector<Dims> kShapes = {{}, {7}, {3, 5, 17}, {1000}, {2, 40001}};

struct UnaryCase {
  Op op;
  Attributes attrs;
  float lo, hi;  // input range; magnitudes in [lo, hi] with random sign when lo > 0 and hi > 0
  bool positive = false;
};

std::vector<UnaryCase> unary_cases() {
  auto attrs = [](std::initializer_list<std::pair<const char*, Attribute::Value>> kv) {
    Attributes a;
    for (const auto& [k, v] : kv) a.set(k, v);
    return a;
  };
  return {
      {Op::Abs, {}, 0.25f, 4.0f},        {Op::Neg, {}, 0.25f, 4.0f},         {Op::Sign, {}, 0.25f, 4.0f},
      {Op::Exp, {}, 0.1f, 80.0f},        {Op::Log, {}, 0.01f, 100.0f, true}, {Op::Sqrt, {}, 0.01f, 100.0f, true},
      {Op::Reciprocal, {}, 0.25f, 4.0f}, {Op::Floor, {}, 0.25f, 4.0f},       {Op::Ceil, {}, 0.25f, 4.0f},
      {Op::Round, {}, 0.25f, 4.0f},      {Op::Sin, {}, 0.25f, 4.0f},         {Op::Cos, {}, 0.25f, 4.0f},
      {Op::Tan, {}, 0.1f, 1.2f},         {Op::Asin, {}, 0.01f, 0.99f},       {Op::Acos, {}, 0.01f, 0.99f},
      {Op::Atan, {}, 0.25f, 4.0f},       {Op::Sinh, {}, 0.25f, 4.0f},        {Op::Cosh, {}, 0.25f, 4.0f},
      {Op::Asinh, {}, 0.25f, 4.0f},      {Op::Acosh, {}, 1.01f, 4.0f, true}, {Op::Atanh, {}, 0.01f, 0.99f},
      {Op::Erf, {}, 0.001f, 5.0f},       {Op::Relu, {}, 0.25f, 4.0f},
      {Op::LeakyRelu, attrs({{"alpha", 0.07f}}), 0.25f, 4.0f},
      {Op::Elu, attrs({{"alpha", 0.8f}}), 0.25f, 4.0f},
      {Op::Selu, {}, 0.25f, 4.0f},
      {Op::Celu, attrs({{"alpha", 1.3f}}), 0.25f, 4.0f},
      {Op::ThresholdedRelu, attrs({{"alpha", 1.1f}}), 0.25f, 4.0f},
      {Op::Sigmoid, {}, 0.01f, 90.0f},
      {Op::HardSigmoid, attrs({{"alpha", 0.3f}, {"beta", 0.4f}}), 0.25f, 4.0f},
      {Op::HardSwish, {}, 0.25f, 5.0f},
      {Op::Tanh, {}, 0.001f, 12.0f},
      {Op::Gelu, {}, 0.01f, 6.0f},
      {Op::Gelu, attrs({{"approximate", std::string("tanh")}}), 0.01f, 6.0f},
      {Op::Softplus, {}, 0.25f, 30.0f},
      {Op::Softsign, {}, 0.25f, 4.0f},
      {Op::Mish, {}, 0.25f, 4.0f},
      {Op::Swish, attrs({{"alpha", 1.5f}}), 0.25f, 4.0f},
  };
}

Tensor input_for(const UnaryCase& c, const Dims& dims, uint32_t seed) {
  Tensor t = random_f32(dims, seed, c.lo, c.hi);
  if (c.positive) {
    for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = std::fabs(t.data<float>()[i]);
  }
  return t;
}

TEST(FastElementwise, AllocationCounterWorks) {
  // run_fast expects zero allocations in run(); make sure the counter can see one.
  std::vector<float>* v = nullptr;
  EXPECT_GT(count_allocations([&] { v = new std::vector<float>(100, 1.0f); }), 0);
  EXPECT_EQ((*v)[99], 1.0f);
  delete v;
}

TEST(FastElementwise, UnaryOpsMatchReference) {
  for (const UnaryCase& c : unary_cases()) {
    for (const Dims& d : kShapes) {
      const uint32_t seed = fresh_seed();
      check(c.op, c.attrs, {input_for(c, d, seed)}, {}, 4e-6,
            cat(op_name(c.op), " ", c.attrs.get_string("approximate", ""), dims_str(d), " seed ", seed));
    }
  }
}

TEST(FastElementwise, UnarySpecialValues) {
  // NaN, infinities and extreme arguments of the approximated functions.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = make_tensor<float>({12}, {nan, inf, -inf, 88.7f, -88.0f, -103.0f, 1e-20f, -1e-20f, 20.0f, -20.0f, 4.5f, -4.5f});
  for (Op op : {Op::Exp, Op::Sigmoid, Op::Tanh, Op::Erf, Op::Relu, Op::Abs, Op::Gelu, Op::HardSigmoid}) {
    check(op, {}, {x}, {}, 4e-6, cat(op_name(op), " special values"));
  }
}

TEST(FastElementwise, ClipWithConstantBounds) {
  const Tensor x = random_f32({3, 1001}, fresh_seed(), 0.25f, 4.0f);
  const Tensor lo = make_tensor<float>({}, {-1.5f}), hi = make_tensor<float>({1}, {2.0f});
  const Tensor lo64 = make_tensor<int64_t>({}, {-1});
  check(Op::Clip, {}, {x, lo, hi}, {false, true, true}, 0, "Clip min max");
  check(Op::Clip, {}, {x, lo64}, {false, true}, 0, "Clip int64 min");
  check(Op::Clip, {}, {x, Tensor(), hi}, {false, false, true}, 0, "Clip max only");
  check(Op::Clip, {}, {x}, {}, 0, "Clip no bounds");
  // Bounds that are not constants: not supported (the reference runs).
  std::vector<const Tensor*> ptrs = {&x, &lo, &hi};
  Attributes none;
  EXPECT_FALSE(tactic_supports("kiln_elementwise", make_spec(Op::Clip, &none, ptrs, {DataType::kFloat32}, {false, false, true})));
}

TEST(FastElementwise, PowConstantAndTensorExponents) {
  const Tensor base = random_f32({5, 777}, fresh_seed(), 0.25f, 3.0f);
  Tensor pos = base.clone();
  for (int64_t i = 0; i < pos.size(); ++i) pos.data<float>()[i] = std::fabs(pos.data<float>()[i]);
  for (float e : {2.0f, 1.0f, 3.0f, -1.0f}) {
    check(Op::Pow, {}, {base, make_tensor<float>({}, {e})}, {false, true}, 1e-6, cat("Pow ", e));
  }
  for (float e : {0.5f, -1.5f, 0.3f}) {
    check(Op::Pow, {}, {pos, make_tensor<float>({1}, {e})}, {false, true}, 1e-6, cat("Pow ", e));
  }
  check(Op::Pow, {}, {base, make_tensor<int64_t>({}, {3})}, {false, true}, 1e-6, "Pow int64 exponent");
  const Tensor ex = random_f32({777}, fresh_seed(), 0.25f, 2.0f);
  check(Op::Pow, {}, {pos, ex}, {}, 1e-6, "Pow tensor exponent");
}

struct ShapePair {
  Dims a, b;
};

TEST(FastElementwise, BinaryOpsBroadcast) {
  const std::vector<ShapePair> shapes = {
      {{3, 5, 17}, {3, 5, 17}}, {{3, 5, 17}, {}},       {{}, {3, 5, 17}},        {{4, 5, 6}, {6}},
      {{4, 5, 6}, {4, 5, 1}},   {{2, 3, 4, 5}, {3, 1, 1}}, {{5, 1}, {1, 7}},     {{6}, {4, 5, 6}},
      {{2, 1, 3}, {1, 4, 1}},   {{1}, {1}},             {{64, 4096}, {4096}},    {{2, 3, 20000}, {2, 1, 20000}},
      {{7, 1, 9}, {1, 1, 1}},   {{0, 3}, {3}},
  };
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min, Op::Sum, Op::Mean}) {
    for (const ShapePair& s : shapes) {
      const uint32_t seed = fresh_seed();
      check(op, {}, {random_f32(s.a, seed), random_f32(s.b, seed + 1)}, {}, 1e-7,
            cat(op_name(op), " ", dims_str(s.a), " ", dims_str(s.b), " seed ", seed));
    }
  }
}

TEST(FastElementwise, BinaryNaNsAndPRelu) {
  Tensor a = random_f32({4, 9}, fresh_seed()), b = random_f32({4, 9}, fresh_seed());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  a.data<float>()[3] = nan;
  b.data<float>()[5] = nan;
  a.data<float>()[7] = nan;
  b.data<float>()[7] = -nan;
  for (Op op : {Op::Max, Op::Min, Op::Add, Op::Div}) check(op, {}, {a, b}, {}, 0, cat(op_name(op), " with NaN"));
  check(Op::PRelu, {}, {random_f32({2, 3, 5, 7}, fresh_seed()), random_f32({3, 1, 1}, fresh_seed())}, {}, 0, "PRelu channel");
  check(Op::PRelu, {}, {random_f32({2, 3, 5, 7}, fresh_seed()), random_f32({1}, fresh_seed())}, {}, 0, "PRelu scalar");
}

TEST(FastElementwise, RejectsWhatItCannotDo) {
  Attributes none;
  const Tensor f = random_f32({3}, 1);
  const Tensor i32 = make_tensor<int32_t>({3}, {1, 2, 3});
  const Tensor h(DataType::kFloat16, {3});
  auto supports = [&](Op op, const Attributes& a, std::vector<const Tensor*> ins, DataType out) {
    return tactic_supports("kiln_elementwise", make_spec(op, &a, ins, {out}));
  };
  EXPECT_TRUE(supports(Op::Add, none, {&f, &f}, DataType::kFloat32));
  EXPECT_FALSE(supports(Op::Add, none, {&i32, &i32}, DataType::kInt32));
  EXPECT_FALSE(supports(Op::Relu, none, {&h}, DataType::kFloat16));
  EXPECT_FALSE(supports(Op::Max, none, {&f, &f, &f}, DataType::kFloat32));  // 3-input Max
  EXPECT_FALSE(supports(Op::Pow, none, {&f, &i32}, DataType::kFloat32));    // non-constant int exponent
  Attributes bad;
  bad.set("approximate", std::string("erf"));
  EXPECT_FALSE(supports(Op::Gelu, bad, {&f}, DataType::kFloat32));
  Attributes celu0;
  celu0.set("alpha", 0.0f);
  EXPECT_FALSE(supports(Op::Celu, celu0, {&f}, DataType::kFloat32));
  // A broadcast the shapes do not allow fails prepare cleanly.
  const Tensor a = random_f32({4, 5}, 2), b = random_f32({3}, 3);
  LayerSpec spec = make_spec(Op::Add, &none, {&a, &b}, {DataType::kFloat32});
  FastRun r = run_fast("kiln_elementwise", spec, {&a, &b}, {{DataType::kFloat32, {4, 5}}});
  EXPECT_FALSE(r.status.is_ok());
}

// ---- FusedElementwise ----

Attributes expr(const std::string& e) {
  Attributes a;
  a.set("expr", e);
  return a;
}

TEST(FastElementwise, FusedChainsMatchReference) {
  struct Case {
    std::string expr;
    std::vector<Dims> dims;
    std::vector<bool> constant;
  };
  const std::vector<Case> cases = {
      {"t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = LeakyRelu[alpha=0.1](t1); y = t2", {{4, 37}, {37}, {4, 1}}, {}},
      {"t0 = Div(x0, x1); t1 = Erf(t0); t2 = Add(t1, x2); t3 = Mul(x0, t2); t4 = Mul(t3, x3); y = t4",
       {{3, 2, 1000}, {}, {}, {1}}, {false, true, true, true}},
      {"t0 = Clip(x0, x1, x2); t1 = Sigmoid(t0); y = t1", {{2, 3000}, {}, {}}, {false, true, true}},
      {"t0 = Clip(x0, _, x1); t1 = Tanh(t0); y = t1", {{5, 7}, {}}, {false, true}},
      {"t0 = Abs(x0); t1 = Pow(t0, x1); t2 = Sqrt(t1); y = t2", {{9, 11}, {}}, {false, true}},
      {"t0 = Abs(x0); t1 = Pow(t0, x1); y = t1", {{9, 11}, {11}}, {}},
      {"t0 = Max(x0, x1, x2); t1 = Mean(t0, x1, x2); t2 = Sum(t1); t3 = Min(t2, x0); y = t3",
       {{6, 5}, {5}, {6, 1}}, {}},
      {"t0 = Exp(x0); t1 = Neg(x1); y = t1", {{3}, {4, 3}}, {}},
      {"t0 = Mul(x0, x0); t1 = Mul(t0, t0); t2 = Sub(t1, t0); y = t2", {{17, 19}}, {}},
      {"t0 = Gelu[approximate=tanh](x0); t1 = HardSwish(t0); t2 = PRelu(t1, x1); y = t2", {{2, 4, 5}, {4, 1}}, {}},
      {"t0 = Add(x0, x1); y = t0", {{1, 1}, {1}}, {}},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> ins;
    const uint32_t seed = fresh_seed();
    for (size_t i = 0; i < c.dims.size(); ++i) ins.push_back(random_f32(c.dims[i], seed + static_cast<uint32_t>(i)));
    check(Op::FusedElementwise, expr(c.expr), ins, c.constant, 4e-6, cat(c.expr, " seed ", seed));
  }
}

TEST(FastElementwise, FusedLongChainManyThreads) {
  // 24 statements over a large tensor: temps are reused, items spread over threads.
  std::string e = "t0 = Mul(x0, x1)";
  for (int k = 1; k < 24; ++k) {
    const char* ops[] = {"Add(t%d, x2)", "Tanh(t%d)", "Mul(t%d, x1)", "Sigmoid(t%d)", "Sub(x0, t%d)"};
    char buf[64];
    std::snprintf(buf, sizeof(buf), ops[k % 5], k - 1);
    e += cat("; t", k, " = ", buf);
  }
  e += "; y = t23";
  const uint32_t seed = fresh_seed();
  check(Op::FusedElementwise, expr(e), {random_f32({3, 50001}, seed), random_f32({50001}, seed + 1), random_f32({3, 1}, seed + 2)},
        {}, 4e-6, cat("long chain seed ", seed));
}

TEST(FastElementwise, FusedRejectsWhatItCannotDo) {
  const Tensor f = random_f32({3}, 1);
  auto supports = [&](const std::string& e, std::vector<const Tensor*> ins, std::vector<bool> constant = {}) {
    const Attributes a = expr(e);
    return tactic_supports("kiln_elementwise", make_spec(Op::FusedElementwise, &a, ins, {DataType::kFloat32}, constant));
  };
  EXPECT_TRUE(supports("t0 = Relu(x0); y = t0", {&f}));
  EXPECT_FALSE(supports("t0 = Clip(x0, x1); y = t0", {&f, &f}));       // bound not constant
  EXPECT_FALSE(supports("t0 = Mod(x0, x1); y = t0", {&f, &f}));        // op without a fast path
  EXPECT_FALSE(supports("t0 = Relu(x0; y = t0", {&f}));                // malformed expr
  const Tensor d(DataType::kFloat64, {3});
  EXPECT_FALSE(supports("t0 = Relu(x0); y = t0", {&d}));               // float64
}

}  // namespace
}  // namespace kiln::testing::fast
