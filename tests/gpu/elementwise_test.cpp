// CUDA elementwise tactics against the CPU reference: "kiln_cuda_elementwise" (unary,
// binary with broadcasting, variadic, comparisons, logic, Where, Clip, integer ops),
// "kiln_cuda_cast" (a dtype matrix with special values) and "nvrtc_fused"
// (FusedElementwise programs compiled with NVRTC, also through stored CUBIN bytes).
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/fused_elementwise.h"
#include "cuda_test_util.h"

namespace kiln::testing::gpu {
namespace {

const char* kEw = "kiln_cuda_elementwise";

std::string dstr(const Dims& d) { return dims_str(d); }

// Integer tensor with values in [lo, hi] (zeros included).
Tensor random_int(DataType dt, const Dims& dims, uint32_t seed, int64_t lo = -20, int64_t hi = 20) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  Tensor f(DataType::kFloat64, dims);
  for (int64_t i = 0; i < f.size(); ++i) f.data<double>()[i] = static_cast<double>(d(gen));
  return convert(f, dt);
}

Tensor scalar_f32(float v) {
  Tensor t(DataType::kFloat32, {});
  t.data<float>()[0] = v;
  return t;
}

Tensor random_bool(const Dims& dims, uint32_t seed) {
  std::mt19937 gen(seed);
  Tensor t(DataType::kBool, dims);
  for (int64_t i = 0; i < t.size(); ++i) t.data<bool>()[i] = (gen() & 1) != 0;
  return t;
}

double float_tol(DataType dt, double tol32) {
  if (dt == DataType::kFloat16) return std::max(tol32, 2e-3);
  if (dt == DataType::kBFloat16) return std::max(tol32, 1.6e-2);
  return tol32;
}

// Runs `tactic` on the layer and compares with the reference: floats within tol (scaled
// for float16/bfloat16), everything else exactly.
void check(const char* tactic, Op op, const Attributes& at, const std::vector<const Tensor*>& ins, double tol32,
           const std::string& what) {
  std::vector<Tensor> ref = run_ref(op, at, ins);
  ASSERT_EQ(ref.size(), 1u) << what;
  const kiln::cuda::LayerSpec spec = make_cuda_spec(op, &at, ins, {ref[0].dtype()});
  CudaRun r = run_cuda(tactic, spec, ins, shapes_of(ref));
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  ASSERT_EQ(r.outputs.size(), 1u) << what;
  const DataType dt = ref[0].dtype();
  if (dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16 || dt == DataType::kFloat64) {
    expect_near_tensor(to_f32(r.outputs[0]), to_f32(ref[0]), float_tol(dt, tol32), what);
  } else {
    expect_equal_tensor(r.outputs[0], ref[0], what);
  }
}

const DataType kFloats[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};

struct UnaryCase {
  Op op;
  Attributes at;
  float lo, hi;
  bool uniform;  // uniform in [lo, hi) rather than magnitude [lo, hi] with random sign
  double tol;
};

Attributes attrs_f(std::initializer_list<std::pair<const char*, float>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}
Attributes attrs_s(const char* k, const char* v) {
  Attributes a;
  a.set(k, std::string(v));
  return a;
}
Attributes attrs_i(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

std::vector<UnaryCase> unary_cases() {
  const double t = 1e-5, tt = 5e-5;
  return {
      {Op::Abs, {}, 0.25f, 2.0f, false, t}, {Op::Neg, {}, 0.25f, 2.0f, false, t},
      {Op::Sign, {}, -2.0f, 2.0f, true, t}, {Op::Exp, {}, 0.25f, 4.0f, false, t},
      {Op::Log, {}, 0.05f, 5.0f, true, t}, {Op::Sqrt, {}, 0.0f, 5.0f, true, t},
      {Op::Reciprocal, {}, 0.25f, 2.0f, false, t}, {Op::Floor, {}, -5.0f, 5.0f, true, t},
      {Op::Ceil, {}, -5.0f, 5.0f, true, t}, {Op::Round, {}, -5.0f, 5.0f, true, t},
      {Op::Sin, {}, 0.25f, 3.0f, false, t}, {Op::Cos, {}, 0.25f, 3.0f, false, t},
      {Op::Tan, {}, -1.2f, 1.2f, true, tt}, {Op::Asin, {}, -0.95f, 0.95f, true, t},
      {Op::Acos, {}, -0.95f, 0.95f, true, t}, {Op::Atan, {}, 0.25f, 4.0f, false, t},
      {Op::Sinh, {}, 0.25f, 3.0f, false, tt}, {Op::Cosh, {}, 0.25f, 3.0f, false, tt},
      {Op::Asinh, {}, 0.25f, 4.0f, false, t}, {Op::Acosh, {}, 1.05f, 5.0f, true, t},
      {Op::Atanh, {}, -0.9f, 0.9f, true, tt}, {Op::Erf, {}, 0.1f, 3.0f, false, t},
      {Op::Relu, {}, 0.25f, 2.0f, false, t}, {Op::LeakyRelu, attrs_f({{"alpha", 0.1f}}), 0.25f, 2.0f, false, t},
      {Op::LeakyRelu, {}, 0.25f, 2.0f, false, t}, {Op::Elu, attrs_f({{"alpha", 0.7f}}), 0.1f, 3.0f, false, t},
      {Op::Selu, {}, 0.1f, 3.0f, false, t}, {Op::Celu, attrs_f({{"alpha", 1.5f}}), 0.1f, 3.0f, false, t},
      {Op::ThresholdedRelu, attrs_f({{"alpha", 0.5f}}), 0.1f, 2.0f, false, t},
      {Op::Sigmoid, {}, 0.1f, 8.0f, false, t}, {Op::HardSigmoid, attrs_f({{"alpha", 0.3f}, {"beta", 0.4f}}), 0.1f, 4.0f, false, t},
      {Op::HardSwish, {}, 0.1f, 5.0f, false, t}, {Op::Tanh, {}, 0.05f, 4.0f, false, t},
      {Op::Gelu, {}, 0.05f, 4.0f, false, t}, {Op::Gelu, attrs_s("approximate", "tanh"), 0.05f, 4.0f, false, t},
      {Op::Softplus, {}, 0.1f, 20.0f, false, t}, {Op::Softsign, {}, 0.1f, 4.0f, false, t},
      {Op::Mish, {}, 0.1f, 6.0f, false, t}, {Op::Swish, attrs_f({{"alpha", 1.7f}}), 0.1f, 6.0f, false, t},
      {Op::Shrink, attrs_f({{"bias", 0.25f}, {"lambd", 0.8f}}), 0.1f, 2.0f, false, t},
  };
}

TEST(CudaElementwise, UnaryFloatOps) {
  KILN_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const UnaryCase& c : unary_cases()) {
    for (DataType dt : kFloats) {
      const Dims dims = {3, 5, 67};  // odd size: vector body and tail
      Tensor x32 = c.uniform ? uniform_f32(dims, seed++, c.lo, c.hi) : random_f32(dims, seed++, c.lo, c.hi);
      Tensor x = convert(x32, dt);
      check(kEw, c.op, c.at, {&x}, c.tol, cat(op_name(c.op), " ", dtype_name(dt)));
    }
  }
}

TEST(CudaElementwise, UnarySpecialValues) {
  KILN_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x(DataType::kFloat32, {10});
  const float v[] = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, 1e30f, -1e30f, 2.5f};
  for (int i = 0; i < 10; ++i) x.data<float>()[i] = v[i];
  for (Op op : {Op::Relu, Op::Sign, Op::Abs, Op::Sigmoid, Op::Tanh, Op::Softplus, Op::HardSwish, Op::Celu, Op::Round,
                Op::IsNaN, Op::IsInf, Op::Exp, Op::Erf}) {
    check(kEw, op, {}, {&x}, 1e-5, cat(op_name(op), " special values"));
  }
  check(kEw, Op::IsInf, attrs_i({{"detect_negative", 0}}), {&x}, 0, "IsInf positive only");
  check(kEw, Op::IsInf, attrs_i({{"detect_positive", 0}}), {&x}, 0, "IsInf negative only");
  Tensor h = convert(x, DataType::kFloat16);
  check(kEw, Op::IsNaN, {}, {&h}, 0, "IsNaN float16");
}

struct Shapes {
  Dims a, b;
};

const Shapes kBroadcast[] = {
    {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{}, {2, 3}}, {{5, 1}, {}},
    {{1003}, {1003}},       {{1001}, {1}},     {{4, 1, 6, 1}, {1, 5, 1, 7}}, {{}, {}},
};

TEST(CudaElementwise, BinaryFloatBroadcast) {
  KILN_REQUIRE_GPU();
  uint32_t seed = 100;
  const std::pair<Op, Attributes> ops[] = {
      {Op::Add, {}}, {Op::Sub, {}}, {Op::Mul, {}}, {Op::Div, {}}, {Op::Max, {}}, {Op::Min, {}}, {Op::Sum, {}},
      {Op::Mean, {}}, {Op::Mod, attrs_i({{"fmod", 1}})}, {Op::Mod, {}}, {Op::Equal, {}}, {Op::Less, {}},
      {Op::LessOrEqual, {}}, {Op::Greater, {}}, {Op::GreaterOrEqual, {}},
  };
  for (const auto& [op, at] : ops) {
    for (DataType dt : kFloats) {
      for (const Shapes& s : kBroadcast) {
        Tensor a = convert(random_f32(s.a, seed++), dt), b = convert(random_f32(s.b, seed++), dt);
        // Equal needs equal values to be interesting: make b a copy of a where shapes allow.
        if (op == Op::Equal && s.a == s.b) {
          for (int64_t i = 0; i < b.size(); i += 2) std::memcpy(static_cast<char*>(b.raw()) + i * dtype_size(dt),
                                                                static_cast<const char*>(a.raw()) + i * dtype_size(dt), dtype_size(dt));
        }
        check(kEw, op, at, {&a, &b}, 1e-5, cat(op_name(op), " ", dtype_name(dt), " ", dstr(s.a), " ", dstr(s.b)));
      }
    }
  }
}

TEST(CudaElementwise, PowAndPRelu) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    Tensor a = convert(uniform_f32({2, 3, 17}, 7, 0.1f, 3.0f), dt);
    Tensor e = convert(uniform_f32({17}, 8, -2.0f, 2.5f), dt);
    check(kEw, Op::Pow, {}, {&a, &e}, 2e-5, cat("Pow ", dtype_name(dt)));
    Tensor ei = random_int(DataType::kInt64, {3, 1}, 9, -3, 4);
    check(kEw, Op::Pow, {}, {&a, &ei}, 2e-5, cat("Pow int64 exponent ", dtype_name(dt)));
    Tensor x = convert(random_f32({2, 3, 4, 5}, 10), dt);
    Tensor slope = convert(random_f32({3, 1, 1}, 11), dt);
    check(kEw, Op::PRelu, {}, {&x, &slope}, 1e-5, cat("PRelu ", dtype_name(dt)));
  }
  Tensor bi = random_int(DataType::kInt32, {40}, 12, -5, 5), ei = random_int(DataType::kInt64, {40}, 13, -2, 9);
  check(kEw, Op::Pow, {}, {&bi, &ei}, 0, "Pow int32^int64");
  Tensor ef = uniform_f32({40}, 14, 0.0f, 3.0f);
  check(kEw, Op::Pow, {}, {&bi, &ef}, 0, "Pow int32^float");
}

TEST(CudaElementwise, IntegerOps) {
  KILN_REQUIRE_GPU();
  uint32_t seed = 200;
  const std::pair<Op, Attributes> ops[] = {
      {Op::Add, {}}, {Op::Sub, {}}, {Op::Mul, {}}, {Op::Div, {}}, {Op::Mod, {}}, {Op::Mod, attrs_i({{"fmod", 1}})},
      {Op::Max, {}}, {Op::Min, {}}, {Op::Sum, {}}, {Op::Mean, {}}, {Op::Equal, {}}, {Op::Less, {}}, {Op::Greater, {}},
      {Op::GreaterOrEqual, {}}, {Op::LessOrEqual, {}}, {Op::BitwiseAnd, {}}, {Op::BitwiseOr, {}}, {Op::BitwiseXor, {}},
      {Op::BitShift, attrs_s("direction", "LEFT")}, {Op::BitShift, attrs_s("direction", "RIGHT")}, {Op::PRelu, {}},
  };
  const DataType ints[] = {DataType::kInt64, DataType::kInt32, DataType::kInt8, DataType::kUInt8};
  for (const auto& [op, at] : ops) {
    for (DataType dt : ints) {
      for (const Shapes& s : {Shapes{{3, 7}, {3, 7}}, Shapes{{2, 3, 4}, {4}}, Shapes{{2, 1, 4}, {3, 1}}}) {
        if (op == Op::PRelu && s.b == Dims{3, 1}) continue;  // slope must broadcast to X's shape
        const bool u = dt == DataType::kUInt8;
        const bool shift = op == Op::BitShift;
        Tensor a = random_int(dt, s.a, seed++, u ? 0 : -120, 120);
        Tensor b = random_int(dt, s.b, seed++, shift ? (u ? 0 : -2) : (u ? 0 : -20), shift ? 70 : 20);
        check(kEw, op, at, {&a, &b}, 0, cat(op_name(op), " ", dtype_name(dt), " ", dstr(s.a), " ", dstr(s.b)));
      }
    }
  }
  for (Op op : {Op::Abs, Op::Neg, Op::Sign, Op::Relu, Op::BitwiseNot}) {
    for (DataType dt : {DataType::kInt64, DataType::kInt32, DataType::kInt16}) {
      Tensor x = random_int(dt, {5, 9}, seed++, -100, 100);
      check(kEw, op, {}, {&x}, 0, cat(op_name(op), " ", dtype_name(dt)));
    }
  }
  // Wrap-around at the dtype's width.
  Tensor big(DataType::kInt32, {4});
  const int32_t bv[] = {2147483647, -2147483647 - 1, 65536, -1};
  for (int i = 0; i < 4; ++i) big.data<int32_t>()[i] = bv[i];
  for (Op op : {Op::Add, Op::Mul, Op::Sub, Op::Div}) check(kEw, op, {}, {&big, &big}, 0, cat(op_name(op), " int32 wrap"));
  check(kEw, Op::Abs, {}, {&big}, 0, "Abs int32 min");
  check(kEw, Op::Neg, {}, {&big}, 0, "Neg int32 min");
}

TEST(CudaElementwise, BoolOps) {
  KILN_REQUIRE_GPU();
  Tensor a = random_bool({4, 9}, 1), b = random_bool({9}, 2);
  for (Op op : {Op::And, Op::Or, Op::Xor, Op::Equal}) check(kEw, op, {}, {&a, &b}, 0, cat(op_name(op), " bool"));
  check(kEw, Op::Not, {}, {&a}, 0, "Not");
}

TEST(CudaElementwise, Variadic) {
  KILN_REQUIRE_GPU();
  for (Op op : {Op::Sum, Op::Mean, Op::Max, Op::Min}) {
    for (DataType dt : kFloats) {
      Tensor a = convert(random_f32({2, 3, 4}, 1), dt), b = convert(random_f32({4}, 2), dt),
             c = convert(random_f32({3, 1}, 3), dt);
      check(kEw, op, {}, {&a, &b, &c}, 1e-5, cat(op_name(op), " x3 ", dtype_name(dt)));
      check(kEw, op, {}, {&a}, 1e-5, cat(op_name(op), " x1 ", dtype_name(dt)));
    }
    Tensor a = random_int(DataType::kInt32, {2, 3, 4}, 4), b = random_int(DataType::kInt32, {4}, 5),
           c = random_int(DataType::kInt32, {3, 1}, 6), d = random_int(DataType::kInt32, {2, 1, 1}, 7);
    check(kEw, op, {}, {&a, &b, &c, &d}, 0, cat(op_name(op), " x4 int32"));
  }
  // NaN propagation of Max/Min.
  Tensor x(DataType::kFloat32, {3}), y(DataType::kFloat32, {3});
  x.data<float>()[0] = std::nanf("");
  x.data<float>()[1] = 1;
  x.data<float>()[2] = 2;
  y.data<float>()[0] = 1;
  y.data<float>()[1] = std::nanf("");
  y.data<float>()[2] = 3;
  check(kEw, Op::Max, {}, {&x, &y}, 0, "Max NaN");
  check(kEw, Op::Min, {}, {&x, &y}, 0, "Min NaN");
}

TEST(CudaElementwise, WhereAndClip) {
  KILN_REQUIRE_GPU();
  Tensor c = random_bool({2, 1, 5}, 3);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt64, DataType::kInt32,
                      DataType::kFloat64, DataType::kBool, DataType::kUInt8}) {
    Tensor x = dt == DataType::kBool ? random_bool({3, 5}, 4) : convert(random_f32({3, 5}, 4, 1, 50), dt);
    Tensor y = dt == DataType::kBool ? random_bool({2, 3, 1}, 5) : convert(random_f32({2, 3, 1}, 5, 1, 50), dt);
    check(kEw, Op::Where, {}, {&c, &x, &y}, 0, cat("Where ", dtype_name(dt)));
  }
  for (DataType dt : kFloats) {
    Tensor x = convert(random_f32({4, 33}, 6, 0.1f, 3.0f), dt);
    Tensor lo = scalar_f32(-0.7f), hi = scalar_f32(1.3f);
    Tensor lo_cast = convert(lo, dt), hi_cast = convert(hi, dt);
    check(kEw, Op::Clip, {}, {&x, &lo_cast, &hi_cast}, 0, cat("Clip both ", dtype_name(dt)));
    check(kEw, Op::Clip, {}, {&x, nullptr, &hi_cast}, 0, cat("Clip omitted min ", dtype_name(dt)));
    check(kEw, Op::Clip, {}, {&x, &lo_cast}, 0, cat("Clip min only ", dtype_name(dt)));
    check(kEw, Op::Clip, {}, {&x}, 0, cat("Clip no bounds ", dtype_name(dt)));
  }
  Tensor xi = random_int(DataType::kInt64, {50}, 7, -100, 100);
  Tensor loi = make_scalar_int64(-10);
  Tensor hif(DataType::kFloat32, {1});
  hif.data<float>()[0] = 33.7f;
  check(kEw, Op::Clip, {}, {&xi, &loi, &hif}, 0, "Clip int64 with int64/float bounds");
}

TEST(CudaElementwise, CastMatrix) {
  KILN_REQUIRE_GPU();
  const double vals[] = {0.0, -0.0, 1.5, -1.5, 2.5, -2.7, 127.9, 128.3, -129.0, 255.5, 300.0, 65504.0, 70000.0,
                         3e9, -3e9, 1e20, -1e20, 0.1, 1e-8, 33.0, -7.0, 1.0,
                         std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()};
  const int nv = static_cast<int>(sizeof(vals) / sizeof(vals[0]));
  Tensor base(DataType::kFloat64, {nv});
  for (int i = 0; i < nv; ++i) base.data<double>()[i] = vals[i];
  const DataType dts[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64,
                          DataType::kInt8,    DataType::kUInt8,   DataType::kInt16,    DataType::kUInt16,
                          DataType::kInt32,   DataType::kUInt32,  DataType::kInt64,    DataType::kBool};
  for (DataType from : dts) {
    Attributes to_from;
    to_from.set("to", static_cast<int64_t>(from));
    Tensor src = run_ref(Op::Cast, to_from, {&base})[0];
    for (DataType to : dts) {
      Attributes at;
      at.set("to", static_cast<int64_t>(to));
      check("kiln_cuda_cast", Op::Cast, at, {&src}, 0, cat("Cast ", dtype_name(from), " -> ", dtype_name(to)));
    }
    // CastLike: the target dtype from the second input.
    Tensor like(DataType::kFloat16, {1});
    check("kiln_cuda_cast", Op::Cast, {}, {&src, &like}, 0, cat("CastLike ", dtype_name(from), " -> float16"));
  }
}

TEST(CudaElementwise, EdgeShapes) {
  KILN_REQUIRE_GPU();
  Tensor e1(DataType::kFloat32, {0, 3}), e2(DataType::kFloat32, {3});
  std::vector<Tensor> ref = run_ref(Op::Add, {}, {&e1, &e2});
  const kiln::cuda::LayerSpec spec = make_cuda_spec(Op::Add, nullptr, {&e1, &e2}, {DataType::kFloat32});
  CudaRun r = run_cuda(kEw, spec, {&e1, &e2}, shapes_of(ref));
  EXPECT_TRUE(r.status.is_ok()) << r.status.message();
  Tensor s = scalar_f32(2.5f);
  check(kEw, Op::Mul, {}, {&s, &s}, 0, "rank 0");
  check(kEw, Op::Exp, {}, {&s}, 1e-6, "rank 0 unary");
  Tensor big = random_f32({64, 1, 33, 1}, 2), small = random_f32({17, 1, 5}, 3);
  check(kEw, Op::Sub, {}, {&big, &small}, 1e-6, "rank 4 strided");
  Tensor r8a = random_f32({2, 1, 2, 1, 2, 1, 2, 1}, 4), r8b = random_f32({1, 2, 1, 2, 1, 2, 1, 2}, 5);
  check(kEw, Op::Add, {}, {&r8a, &r8b}, 1e-6, "rank 8 alternating broadcast");
}

TEST(CudaElementwise, Declines) {
  KILN_REQUIRE_GPU();
  const auto* t = cuda_tactic_for(kEw, Op::Add);
  ASSERT_NE(t, nullptr);
  Tensor d(DataType::kFloat64, {2}), u(DataType::kUInt64, {2}), f(DataType::kFloat32, {2}), h(DataType::kFloat16, {2});
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::Add, nullptr, {&d, &d}, {DataType::kFloat64})));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::Add, nullptr, {&u, &u}, {DataType::kUInt64})));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::Add, nullptr, {&f, &h}, {DataType::kFloat32})));
  const auto* celu = cuda_tactic_for(kEw, Op::Celu);
  ASSERT_NE(celu, nullptr);
  Attributes a0 = attrs_f({{"alpha", 0.0f}});
  EXPECT_FALSE(celu->supports(make_cuda_spec(Op::Celu, &a0, {&f}, {DataType::kFloat32})));
  const auto* cast = cuda_tactic_for("kiln_cuda_cast", Op::Cast);
  ASSERT_NE(cast, nullptr);
  Attributes to8;
  to8.set("to", static_cast<int64_t>(DataType::kFloat8E4M3FN));
  EXPECT_FALSE(cast->supports(make_cuda_spec(Op::Cast, &to8, {&f}, {DataType::kFloat8E4M3FN})));
}

// ---- FusedElementwise ----

struct FusedCase {
  const char* expr;
  std::vector<std::pair<DataType, Dims>> inputs;
};

Tensor fused_input(DataType dt, const Dims& dims, uint32_t seed) {
  if (dt == DataType::kBool) return random_bool(dims, seed);
  if (is_integer(dt)) return random_int(dt, dims, seed, -9, 9);
  return convert(random_f32(dims, seed, 0.2f, 3.0f), dt);
}

void check_fused(const FusedCase& c, uint32_t seed) {
  Attributes at;
  at.set("expr", std::string(c.expr));
  std::vector<Tensor> ins;
  for (const auto& [dt, dims] : c.inputs) ins.push_back(fused_input(dt, dims, seed++));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : ins) ptrs.push_back(&t);
  check("nvrtc_fused", Op::FusedElementwise, at, ptrs, 2e-5, c.expr);
}

TEST(CudaFusedElementwise, Programs) {
  KILN_REQUIRE_GPU();
  using D = DataType;
  const FusedCase cases[] = {
      {"t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = LeakyRelu[alpha=0.1](t1); y = t2",
       {{D::kFloat32, {2, 3, 64}}, {D::kFloat32, {64}}, {D::kFloat32, {2, 3, 64}}}},
      {"t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = LeakyRelu[alpha=0.1](t1); y = t2",
       {{D::kFloat16, {2, 3, 64}}, {D::kFloat16, {64}}, {D::kFloat16, {}}}},
      {"t0 = Gelu(x0); t1 = Mul(t0, x1); y = t1", {{D::kBFloat16, {4, 129}}, {D::kBFloat16, {4, 129}}}},
      {"t0 = Gelu[approximate=tanh](x0); t1 = Mul(t0, x1); y = t1", {{D::kFloat16, {4, 129}}, {D::kFloat16, {4, 129}}}},
      {"t0 = HardSwish(x0); y = t0", {{D::kFloat32, {1000}}}},
      {"t0 = Clip(x0, _, x1); y = t0", {{D::kFloat16, {3, 50}}, {D::kFloat16, {}}}},
      {"t0 = Clip(x0, x1, x2); t1 = Sigmoid(t0); t2 = Mul(t1, x0); y = t2",
       {{D::kFloat32, {3, 50}}, {D::kFloat32, {1}}, {D::kInt64, {}}}},
      {"t0 = Sub(x0, x1); t1 = Div(t0, x2); t2 = Pow(t1, x3); t3 = Sqrt(t2); y = t3",
       {{D::kFloat32, {2, 5, 7}}, {D::kFloat32, {5, 1}}, {D::kFloat32, {7}}, {D::kFloat32, {}}}},
      {"t0 = Less(x0, x1); t1 = Where(t0, x0, x1); t2 = Tanh(t1); y = t2",
       {{D::kFloat16, {6, 1, 8}}, {D::kFloat16, {1, 5, 8}}}},
      {"t0 = Greater(x0, x1); t1 = Not(t0); t2 = And(t1, x2); y = t2",
       {{D::kFloat32, {4, 8}}, {D::kFloat32, {8}}, {D::kBool, {4, 1}}}},
      {"t0 = Add(x0, x1); t1 = Mul(t0, x1); t2 = Mod(t1, x2); t3 = Max(t2, x0, x1); y = t3",
       {{D::kInt32, {3, 9}}, {D::kInt32, {9}}, {D::kInt32, {3, 1}}}},
      {"t0 = Sum(x0, x1, x2); t1 = Mean(t0, x1); t2 = Erf(t1); t3 = Softplus(t2); t4 = Mish(t3); y = t4",
       {{D::kBFloat16, {2, 40}}, {D::kBFloat16, {40}}, {D::kBFloat16, {2, 1}}}},
      {"t0 = Abs(x0); t1 = Neg(t0); t2 = LessOrEqual(t1, x1); y = t2", {{D::kInt64, {7, 3}}, {D::kInt64, {3}}}},
      {"t0 = Exp(x0); t1 = Log(t0); t2 = Selu(t1); t3 = Elu[alpha=0.5](t2); t4 = Celu(t3); y = t4",
       {{D::kFloat32, {333}}}},
      {"t0 = Mul(x0, x0); y = t0", {{D::kFloat16, {}}}},
  };
  uint32_t seed = 1;
  for (const FusedCase& c : cases) check_fused(c, seed += 10);
}

TEST(CudaFusedElementwise, CubinRoundTripAndDeclines) {
  KILN_REQUIRE_GPU();
  Attributes at;
  at.set("expr", std::string("t0 = Mul(x0, x1); t1 = Relu(t0); y = t1"));
  Tensor a = random_f32({3, 8}, 1), b = random_f32({8}, 2);
  std::vector<Tensor> ref = run_ref(Op::FusedElementwise, at, {&a, &b});
  kiln::cuda::LayerSpec spec = make_cuda_spec(Op::FusedElementwise, &at, {&a, &b}, {DataType::kFloat32});
  auto cubin = kiln::cuda::fused_elementwise_cubin(spec);
  ASSERT_TRUE(cubin.is_ok()) << cubin.status().message();
  EXPECT_GT(cubin->size(), 0u);
  auto k = kiln::cuda::create_fused_elementwise_from_cubin(spec, *cubin);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  size_t ws = 1;
  ASSERT_TRUE((*k)->prepare({{a.dtype(), a.dims()}, {b.dtype(), b.dims()}}, shapes_of(ref), &ws).is_ok());
  EXPECT_EQ(ws, 0u);
  kiln::cuda::DeviceBuffer da, db, dy;
  ASSERT_TRUE(da.upload(a.raw(), a.nbytes()).is_ok());
  ASSERT_TRUE(db.upload(b.raw(), b.nbytes()).is_ok());
  ASSERT_TRUE(dy.reserve(ref[0].nbytes()).is_ok());
  Tensor va = Tensor::wrap(a.dtype(), a.dims(), da.get()), vb = Tensor::wrap(b.dtype(), b.dims(), db.get());
  Tensor vy = Tensor::wrap(DataType::kFloat32, ref[0].dims(), dy.get());
  ASSERT_TRUE((*k)->enqueue({&va, &vb}, {&vy}, nullptr, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Tensor got(DataType::kFloat32, ref[0].dims());
  ASSERT_EQ(cudaMemcpy(got.raw(), dy.get(), got.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  expect_near_tensor(got, ref[0], 1e-6, "from cubin");
  // The same program compiles once: the cache returns the same bytes.
  auto again = kiln::cuda::fused_elementwise_cubin(spec);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *cubin);

  const auto* t = cuda_tactic_for("nvrtc_fused", Op::FusedElementwise);
  ASSERT_NE(t, nullptr);
  Tensor d(DataType::kFloat64, {8});
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedElementwise, &at, {&d, &d}, {DataType::kFloat64})));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedElementwise, &at, {&a, &b}, {DataType::kFloat16})));
  Attributes bad;
  bad.set("expr", std::string("t0 = Mul(x0, x1; y = t0"));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedElementwise, &bad, {&a, &b}, {DataType::kFloat32})));
}

// Bandwidth of a few layers (prints, never asserts; run with --gtest_also_run_disabled_tests).
TEST(CudaElementwise, DISABLED_Bandwidth) {
  KILN_REQUIRE_GPU();
  const int64_t n = 1 << 24;
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    Tensor a(dt, {n}), b(dt, {n}), row(dt, {4096}), a2(dt, {n / 4096, 4096});
    const double es = static_cast<double>(dtype_size(dt));
    double ms = time_layer_ms(kEw, Op::Add, {}, {&a, &b}, {dt, {n}});
    std::printf("Add same shape %s: %.3f ms, %.0f GB/s\n", dtype_name(dt), ms, 3 * n * es / ms / 1e6);
    ms = time_layer_ms(kEw, Op::Gelu, {}, {&a}, {dt, {n}});
    std::printf("Gelu %s: %.3f ms, %.0f GB/s\n", dtype_name(dt), ms, 2 * n * es / ms / 1e6);
    ms = time_layer_ms(kEw, Op::Add, {}, {&a2, &row}, {dt, a2.dims()});
    std::printf("Add [4096,4096]+[4096] %s (generic): %.3f ms, %.0f GB/s\n", dtype_name(dt), ms, 2 * n * es / ms / 1e6);
    Attributes at;
    at.set("expr", std::string("t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = Gelu(t1); y = t2"));
    ms = time_layer_ms("nvrtc_fused", Op::FusedElementwise, at, {&a2, &row, &a2}, {dt, a2.dims()});
    std::printf("Fused Gelu(x*row+z) %s: %.3f ms, %.0f GB/s\n", dtype_name(dt), ms, 3 * n * es / ms / 1e6);
  }
}

}  // namespace
}  // namespace kiln::testing::gpu
