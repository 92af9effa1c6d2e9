// CUDA conv family tests: cudnn_conv and kiln_cuda_depthwise (Conv, FusedConv) and
// kiln_cuda_pool (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) against the CPU
// reference kernels, in float32/float16/bfloat16 and in both layouts (NHWC: the inputs are
// transposed on the host and the output transposed back before the comparison).
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"

// cuda_test_util.h names TensorShape unqualified inside kiln::testing::gpu without a
// using-declaration for it (reported to the lead); provide one until it has it.
namespace kiln::testing::gpu {
using kiln::fast::TensorShape;
}  // namespace kiln::testing::gpu

#include "gpu/cuda_test_util.h"

namespace kiln::testing::gpu {
namespace {

using Ints = std::vector<int64_t>;

// [N, C, S...] <-> [N, S..., C], any dtype (bytes moved).
Tensor to_nhwc(const Tensor& t) {
  const Dims& d = t.dims();
  const int64_t N = d[0], C = d[1], S = num_elements(Dims(d.begin() + 2, d.end()));
  Dims od = {N};
  od.insert(od.end(), d.begin() + 2, d.end());
  od.push_back(C);
  Tensor o(t.dtype(), od);
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const unsigned char*>(t.raw());
  auto* dst = static_cast<unsigned char*>(o.raw());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s)
        std::memcpy(dst + static_cast<size_t>((n * S + s) * C + c) * es, src + static_cast<size_t>((n * C + c) * S + s) * es,
                    es);
  return o;
}

Tensor to_nchw(const Tensor& t) {
  const Dims& d = t.dims();
  const int64_t N = d[0], C = d.back(), S = num_elements(Dims(d.begin() + 1, d.end() - 1));
  Dims od = {N, C};
  od.insert(od.end(), d.begin() + 1, d.end() - 1);
  Tensor o(t.dtype(), od);
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const unsigned char*>(t.raw());
  auto* dst = static_cast<unsigned char*>(o.raw());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s)
        std::memcpy(dst + static_cast<size_t>((n * C + c) * S + s) * es, src + static_cast<size_t>((n * S + s) * C + c) * es,
                    es);
  return o;
}

double tol_for(DataType dt, bool tf32 = false) {
  if (dt == DataType::kFloat16) return 2e-2;
  if (dt == DataType::kBFloat16) return 5e-2;
  return tf32 ? 1e-2 : 1e-4;
}

const char* dt_str(DataType dt) { return dtype_name(dt); }

struct ConvCase {
  std::string name;
  Op op = Op::Conv;
  Dims x, w;
  bool bias = true;
  bool z = false;
  Attributes attrs;
};

// Runs `tactic` on the case in dtype `dt` (and layout), compares with the reference.
void check_conv(const std::string& tactic, const ConvCase& c, DataType dt, bool nhwc, uint32_t seed = 1,
                bool w_constant = true) {
  const std::string what = c.name + " / " + tactic + " / " + dt_str(dt) + (nhwc ? " / NHWC" : " / NCHW");
  SCOPED_TRACE(what);
  Tensor x32 = random_f32(c.x, seed);
  Tensor w32 = random_f32(c.w, seed + 1, 0.05f, 0.5f);
  const int64_t M = c.w[0];
  Tensor b32 = random_f32({M}, seed + 2);
  Tensor x = convert(x32, dt), w = convert(w32, dt), b = convert(b32, dt);
  // The reference output (without Z) gives Y's shape; Z is random of that shape.
  Attributes ref_attrs = c.attrs;
  std::vector<Tensor> shape_ref = run_ref(Op::Conv, ref_attrs, {&x, &w, c.bias ? &b : nullptr});
  ASSERT_EQ(shape_ref.size(), 1u);
  Tensor z = convert(random_f32(shape_ref[0].dims(), seed + 3), dt);
  std::vector<const Tensor*> ref_in = {&x, &w, c.bias ? &b : nullptr};
  if (c.op == Op::FusedConv) ref_in.push_back(c.z ? &z : nullptr);
  std::vector<Tensor> want = run_ref(c.op, ref_attrs, ref_in);
  ASSERT_EQ(want.size(), 1u);

  Attributes a = c.attrs;
  if (nhwc) a.set("kiln_layout", std::string("NHWC"));
  Tensor xg = nhwc ? to_nhwc(x) : x;
  Tensor zg = nhwc ? to_nhwc(z) : z;
  std::vector<const Tensor*> in = {&xg, &w, c.bias ? &b : nullptr};
  if (c.op == Op::FusedConv) in.push_back(c.z ? &zg : nullptr);
  const auto spec = make_cuda_spec(c.op, &a, in, {dt}, {false, w_constant, true, false});
  Dims yd = nhwc ? to_nhwc(want[0]).dims() : want[0].dims();
  CudaRun r = run_cuda(tactic, spec, in, {{dt, yd}});
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  ASSERT_EQ(r.outputs.size(), 1u);
  Tensor got = nhwc ? to_nchw(r.outputs[0]) : r.outputs[0];
  expect_near_tensor(to_f32(got), to_f32(want[0]), tol_for(dt), what);
}

Attributes conv_attrs(Ints strides, Ints pads, Ints dilations = {}, int64_t group = 1) {
  Attributes a;
  if (!strides.empty()) a.set("strides", strides);
  if (!pads.empty()) a.set("pads", pads);
  if (!dilations.empty()) a.set("dilations", dilations);
  if (group != 1) a.set("group", group);
  return a;
}

ConvCase stem() {
  ConvCase c;
  c.name = "resnet stem 7x7/2";
  c.x = {2, 3, 32, 32};
  c.w = {16, 3, 7, 7};
  c.attrs = conv_attrs({2, 2}, {3, 3, 3, 3});
  return c;
}

ConvCase residual_relu() {
  ConvCase c;
  c.name = "3x3 + residual + Relu";
  c.op = Op::FusedConv;
  c.x = {2, 16, 14, 14};
  c.w = {16, 16, 3, 3};
  c.z = true;
  c.attrs = conv_attrs({1, 1}, {1, 1, 1, 1});
  c.attrs.set("activation", std::string("Relu"));
  return c;
}

ConvCase pointwise_s2() {
  ConvCase c;
  c.name = "1x1 stride 2";
  c.x = {2, 32, 15, 15};
  c.w = {64, 32, 1, 1};
  c.bias = false;
  c.attrs = conv_attrs({2, 2}, {});
  return c;
}

ConvCase depthwise_hswish(int64_t stride = 1, int64_t mult = 1) {
  ConvCase c;
  c.name = "depthwise 3x3 + HardSwish, stride " + std::to_string(stride) + ", multiplier " + std::to_string(mult);
  c.op = Op::FusedConv;
  c.x = {2, 32, 17, 17};
  c.w = {32 * mult, 1, 3, 3};
  c.attrs = conv_attrs({stride, stride}, {1, 1, 1, 1}, {}, 32);
  c.attrs.set("activation", std::string("HardSwish"));
  return c;
}

ConvCase grouped() {
  ConvCase c;
  c.name = "grouped 3x3 g4 + LeakyRelu";
  c.op = Op::FusedConv;
  c.x = {1, 16, 10, 10};
  c.w = {32, 4, 3, 3};
  c.attrs = conv_attrs({1, 1}, {1, 1, 1, 1}, {}, 4);
  c.attrs.set("activation", std::string("LeakyRelu"));
  c.attrs.set("alpha", 0.1f);
  return c;
}

ConvCase dilated() {
  ConvCase c;
  c.name = "dilated 3x3 d2";
  c.x = {1, 8, 20, 20};
  c.w = {8, 8, 3, 3};
  c.attrs = conv_attrs({1, 1}, {2, 2, 2, 2}, {2, 2});
  return c;
}

ConvCase asymmetric() {
  ConvCase c;
  c.name = "asymmetric pads + residual";
  c.op = Op::FusedConv;
  c.z = true;
  c.x = {1, 8, 12, 11};
  c.w = {12, 8, 3, 3};
  c.attrs = conv_attrs({2, 1}, {0, 1, 1, 2});
  return c;
}

ConvCase same_upper() {
  ConvCase c;
  c.name = "SAME_UPPER stride 2";
  c.x = {1, 8, 16, 16};
  c.w = {8, 8, 3, 3};
  c.attrs = conv_attrs({2, 2}, {});
  c.attrs.set("auto_pad", std::string("SAME_UPPER"));
  return c;
}

ConvCase conv1d() {
  ConvCase c;
  c.name = "1-D k5 s2";
  c.x = {2, 8, 30};
  c.w = {16, 8, 5};
  c.attrs = conv_attrs({2}, {2, 2});
  return c;
}

ConvCase conv3d() {
  ConvCase c;
  c.name = "3-D 3x3x3";
  c.x = {1, 4, 6, 8, 8};
  c.w = {8, 4, 3, 3, 3};
  c.attrs = conv_attrs({1, 1, 1}, {1, 1, 1, 1, 1, 1});
  return c;
}

const DataType kFloats[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};

TEST(CudaConv, ResNetStem) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    check_conv("cudnn_conv", stem(), dt, false);
    check_conv("cudnn_conv", stem(), dt, true);
  }
}

TEST(CudaConv, ResidualRelu) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    check_conv("cudnn_conv", residual_relu(), dt, false);
    check_conv("cudnn_conv", residual_relu(), dt, true);
  }
  ConvCase c = residual_relu();
  c.name = "3x3 + bias + Relu, no residual";
  c.z = false;
  check_conv("cudnn_conv", c, DataType::kFloat32, false);
  check_conv("cudnn_conv", c, DataType::kFloat16, true);
  c.name = "3x3 + bias, no activation (IDENTITY)";
  c.attrs.set("activation", std::string("None"));
  check_conv("cudnn_conv", c, DataType::kFloat32, false);
  check_conv("cudnn_conv", c, DataType::kFloat16, true);
  c.name = "3x3 + residual, no bias";
  c.z = true;
  c.bias = false;
  check_conv("cudnn_conv", c, DataType::kFloat32, false);
}

TEST(CudaConv, PointwiseStride2) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    check_conv("cudnn_conv", pointwise_s2(), dt, false);
    check_conv("cudnn_conv", pointwise_s2(), dt, true);
  }
}

TEST(CudaConv, DepthwiseHardSwish) {
  KILN_REQUIRE_GPU();
  for (const char* tactic : {"cudnn_conv", "kiln_cuda_depthwise"}) {
    for (DataType dt : kFloats) {
      for (bool nhwc : {false, true}) {
        check_conv(tactic, depthwise_hswish(1, 1), dt, nhwc);
        check_conv(tactic, depthwise_hswish(2, 1), dt, nhwc);
      }
    }
    check_conv(tactic, depthwise_hswish(1, 2), DataType::kFloat32, false);
    check_conv(tactic, depthwise_hswish(2, 2), DataType::kFloat16, true);
  }
  // Depthwise with residual, SAME_UPPER (asymmetric pads), 5x5.
  ConvCase c;
  c.name = "depthwise 5x5 SAME_UPPER s2 + residual + SiLU";
  c.op = Op::FusedConv;
  c.z = true;
  c.x = {1, 24, 15, 16};
  c.w = {24, 1, 5, 5};
  c.attrs = conv_attrs({2, 2}, {}, {}, 24);
  c.attrs.set("auto_pad", std::string("SAME_UPPER"));
  c.attrs.set("activation", std::string("SiLU"));
  for (const char* tactic : {"cudnn_conv", "kiln_cuda_depthwise"}) {
    check_conv(tactic, c, DataType::kFloat32, false);
    check_conv(tactic, c, DataType::kFloat16, true);
  }
  // 1-D depthwise.
  ConvCase d;
  d.name = "depthwise 1-D k3";
  d.x = {2, 16, 20};
  d.w = {16, 1, 3};
  d.attrs = conv_attrs({1}, {1, 1}, {}, 16);
  check_conv("kiln_cuda_depthwise", d, DataType::kFloat32, false);
  check_conv("kiln_cuda_depthwise", d, DataType::kFloat16, true);
  // Channel counts that are not a multiple of the 16-byte vector (8 halves, 4 floats): the
  // NHWC kernel's one-channel-per-thread path; 40 channels: the vector path with 5 groups.
  for (int64_t ch : {12, 6, 40}) {
    ConvCase e;
    e.name = "depthwise 3x3, " + std::to_string(ch) + " channels";
    e.x = {2, ch, 9, 11};
    e.w = {ch, 1, 3, 3};
    e.attrs = conv_attrs({1, 1}, {1, 1, 1, 1}, {}, ch);
    for (DataType dt : kFloats) check_conv("kiln_cuda_depthwise", e, dt, true);
  }
}

TEST(CudaConv, Grouped) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    check_conv("cudnn_conv", grouped(), dt, false);
    check_conv("cudnn_conv", grouped(), dt, true);
  }
}

TEST(CudaConv, Dilated) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    check_conv("cudnn_conv", dilated(), dt, false);
    check_conv("cudnn_conv", dilated(), dt, true);
  }
}

TEST(CudaConv, AsymmetricPadsAndAutoPad) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    check_conv("cudnn_conv", asymmetric(), dt, false);
    check_conv("cudnn_conv", asymmetric(), dt, true);
    check_conv("cudnn_conv", same_upper(), dt, false);
    check_conv("cudnn_conv", same_upper(), dt, true);
  }
  ConvCase c = same_upper();
  c.name = "SAME_LOWER stride 2";
  c.attrs.set("auto_pad", std::string("SAME_LOWER"));
  check_conv("cudnn_conv", c, DataType::kFloat32, false);
  c.name = "VALID";
  c.attrs.set("auto_pad", std::string("VALID"));
  check_conv("cudnn_conv", c, DataType::kFloat32, true);
}

TEST(CudaConv, OneAndThreeD) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    check_conv("cudnn_conv", conv1d(), dt, false);
    check_conv("cudnn_conv", conv1d(), dt, true);
    check_conv("cudnn_conv", conv3d(), dt, false);
    check_conv("cudnn_conv", conv3d(), dt, true);
  }
}

TEST(CudaConv, Activations) {
  KILN_REQUIRE_GPU();
  struct A {
    const char* act;
    std::vector<std::pair<const char*, float>> floats;
    const char* approx;
  };
  const std::vector<A> acts = {
      {"Sigmoid", {}, nullptr},      {"Tanh", {}, nullptr},
      {"HardSigmoid", {{"alpha", 0.3f}, {"beta", 0.4f}}, nullptr},
      {"Clip", {{"min", -1.0f}, {"max", 2.0f}}, nullptr},
      {"Clip", {{"max", 1.5f}}, nullptr},
      {"SiLU", {}, nullptr},         {"Swish", {{"alpha", 1.5f}}, nullptr},
      {"Gelu", {}, nullptr},         {"Gelu", {}, "tanh"},
      {"LeakyRelu", {}, nullptr},    {"HardSwish", {}, nullptr},
  };
  for (const A& x : acts) {
    ConvCase c = dilated();
    c.op = Op::FusedConv;
    c.z = true;
    c.name = std::string("dilated + residual + ") + x.act + (x.approx ? " (tanh)" : "");
    c.attrs.set("activation", std::string(x.act));
    for (const auto& f : x.floats) c.attrs.set(f.first, f.second);
    if (x.approx) c.attrs.set("approximate", std::string(x.approx));
    check_conv("cudnn_conv", c, DataType::kFloat32, false);
    if (std::string(x.act) != "Clip") check_conv("cudnn_conv", c, DataType::kFloat16, true);  // (fp16 Clip: see report)
    ConvCase d = depthwise_hswish();
    d.z = true;
    d.name = std::string("depthwise + residual + ") + x.act;
    d.attrs = c.attrs;
    d.attrs.set("group", int64_t{32});
    d.attrs.set("pads", Ints{1, 1, 1, 1});
    d.attrs.set("strides", Ints{1, 1});
    d.attrs.set("dilations", Ints{1, 1});
    check_conv("kiln_cuda_depthwise", d, DataType::kFloat32, true);
  }
}

TEST(CudaConv, Tf32) {
  KILN_REQUIRE_GPU();
  ConvCase c = residual_relu();
  Tensor x = random_f32(c.x, 5), w = random_f32(c.w, 6, 0.05f, 0.5f), b = random_f32({c.w[0]}, 7);
  std::vector<Tensor> ref0 = run_ref(Op::Conv, c.attrs, {&x, &w, &b});
  Tensor z = random_f32(ref0[0].dims(), 8);
  std::vector<Tensor> want = run_ref(Op::FusedConv, c.attrs, {&x, &w, &b, &z});
  kiln::cuda::Env env = test_env();
  env.tf32 = true;
  auto spec = make_cuda_spec(Op::FusedConv, &c.attrs, {&x, &w, &b, &z}, {DataType::kFloat32}, {false, true, true, false});
  spec.env = &env;
  CudaRun r = run_cuda("cudnn_conv", spec, {&x, &w, &b, &z}, shapes_of(want));
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  expect_near_tensor(r.outputs[0], want[0], tol_for(DataType::kFloat32, true), "tf32 3x3 residual relu");
}

TEST(CudaConv, NonConstantWeights) {
  KILN_REQUIRE_GPU();
  check_conv("cudnn_conv", stem(), DataType::kFloat32, false, 11, /*w_constant=*/false);
  check_conv("cudnn_conv", grouped(), DataType::kFloat16, false, 12, /*w_constant=*/false);
}

TEST(CudaConv, EdgeCases) {
  KILN_REQUIRE_GPU();
  // Empty batch: a no-op.
  {
    ConvCase c = stem();
    c.name = "empty batch";
    c.x = {0, 3, 32, 32};
    check_conv("cudnn_conv", c, DataType::kFloat32, false);
    check_conv("cudnn_conv", c, DataType::kFloat16, true);
    ConvCase d = depthwise_hswish();
    d.name = "empty batch depthwise";
    d.x = {0, 32, 17, 17};
    check_conv("kiln_cuda_depthwise", d, DataType::kFloat32, false);
  }
  // Empty spatial input with padding: every output is bias (+ Z, activation).
  {
    ConvCase c;
    c.name = "empty spatial input, padded";
    c.op = Op::FusedConv;
    c.z = true;
    c.x = {1, 4, 0, 3};
    c.w = {8, 4, 1, 1};
    c.attrs = conv_attrs({1, 1}, {1, 1, 1, 1});
    c.attrs.set("activation", std::string("Sigmoid"));
    check_conv("cudnn_conv", c, DataType::kFloat32, false);
  }
  // Batch of one, single output pixel.
  {
    ConvCase c;
    c.name = "single output pixel";
    c.x = {1, 5, 3, 3};
    c.w = {7, 5, 3, 3};
    c.attrs = conv_attrs({1, 1}, {});
    check_conv("cudnn_conv", c, DataType::kFloat32, false);
    check_conv("cudnn_conv", c, DataType::kBFloat16, true);
  }
}

TEST(CudaConv, Declines) {
  KILN_REQUIRE_GPU();
  const kiln::cuda::Tactic* t = cuda_tactic_for("cudnn_conv", Op::FusedConv);
  const kiln::cuda::Tactic* dw = cuda_tactic_for("kiln_cuda_depthwise", Op::Conv);
  ASSERT_NE(t, nullptr);
  ASSERT_NE(dw, nullptr);
  Tensor x = random_f32({1, 4, 8, 8}, 1), w = random_f32({4, 4, 3, 3}, 2);
  Attributes a;
  a.set("activation", std::string("Mish"));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedConv, &a, {&x, &w}, {DataType::kFloat32}, {false, true})));
  Attributes l;
  l.set("kiln_layout", std::string("NCWH"));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedConv, &l, {&x, &w}, {DataType::kFloat32}, {false, true})));
  Tensor xd(DataType::kFloat64, {1, 4, 8, 8}), wd(DataType::kFloat64, {4, 4, 3, 3});
  Attributes e;
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedConv, &e, {&xd, &wd}, {DataType::kFloat64}, {false, true})));
  // NHWC needs constant weights.
  Attributes n;
  n.set("kiln_layout", std::string("NHWC"));
  EXPECT_FALSE(t->supports(make_cuda_spec(Op::FusedConv, &n, {&x, &w}, {DataType::kFloat32}, {false, false})));
  // Not depthwise.
  EXPECT_FALSE(dw->supports(make_cuda_spec(Op::Conv, &e, {&x, &w}, {DataType::kFloat32}, {false, true})));
  // MaxPool with Indices wanted.
  const kiln::cuda::Tactic* p = cuda_tactic_for("kiln_cuda_pool", Op::MaxPool);
  ASSERT_NE(p, nullptr);
  Attributes pa;
  pa.set("kernel_shape", Ints{2, 2});
  EXPECT_TRUE(p->supports(make_cuda_spec(Op::MaxPool, &pa, {&x}, {DataType::kFloat32})));
  EXPECT_TRUE(p->supports(make_cuda_spec(Op::MaxPool, &pa, {&x}, {DataType::kFloat32, DataType::kUndefined})));
  EXPECT_FALSE(p->supports(make_cuda_spec(Op::MaxPool, &pa, {&x}, {DataType::kFloat32, DataType::kInt64})));
}

// ---- pooling ----

void check_pool(Op op, const std::string& name, const Attributes& attrs, const Dims& xd, DataType dt, bool nhwc,
                uint32_t seed = 3) {
  const std::string what = name + " / " + op_name(op) + " / " + dt_str(dt) + (nhwc ? " / NHWC" : " / NCHW");
  SCOPED_TRACE(what);
  Tensor x = convert(random_f32(xd, seed), dt);
  std::vector<Tensor> want = run_ref(op, attrs, {&x});
  ASSERT_EQ(want.size(), 1u);
  Attributes a = attrs;
  if (nhwc) a.set("kiln_layout", std::string("NHWC"));
  Tensor xg = nhwc ? to_nhwc(x) : x;
  const auto spec = make_cuda_spec(op, &a, {&xg}, {dt});
  Dims yd = nhwc ? to_nhwc(want[0]).dims() : want[0].dims();
  CudaRun r = run_cuda("kiln_cuda_pool", spec, {&xg}, {{dt, yd}});
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  Tensor got = nhwc ? to_nchw(r.outputs[0]) : r.outputs[0];
  const bool is_max = op == Op::MaxPool || op == Op::GlobalMaxPool;
  const double tol = is_max ? 0.0 : (dt == DataType::kFloat32 ? 1e-5 : tol_for(dt));
  expect_near_tensor(to_f32(got), to_f32(want[0]), tol, what);
}

Attributes pool_attrs(Ints kernel, Ints strides, Ints pads, int64_t ceil_mode = 0, int64_t count_pad = -1,
                      Ints dilations = {}) {
  Attributes a;
  a.set("kernel_shape", kernel);
  if (!strides.empty()) a.set("strides", strides);
  if (!pads.empty()) a.set("pads", pads);
  if (ceil_mode) a.set("ceil_mode", ceil_mode);
  if (count_pad >= 0) a.set("count_include_pad", count_pad);
  if (!dilations.empty()) a.set("dilations", dilations);
  return a;
}

TEST(CudaPool, MaxPool) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    for (bool nhwc : {false, true}) {
      check_pool(Op::MaxPool, "resnet 3x3/2 p1", pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}), {2, 16, 17, 17}, dt, nhwc);
      check_pool(Op::MaxPool, "2x2/2 ceil", pool_attrs({2, 2}, {2, 2}, {}, 1), {1, 8, 9, 7}, dt, nhwc);
    }
  }
  check_pool(Op::MaxPool, "dilated asym pads", pool_attrs({3, 2}, {1, 2}, {0, 1, 2, 1}, 0, -1, {2, 1}),
             {1, 4, 12, 11}, DataType::kFloat32, false);
  Attributes su = pool_attrs({3, 3}, {2, 2}, {});
  su.set("auto_pad", std::string("SAME_UPPER"));
  check_pool(Op::MaxPool, "SAME_UPPER", su, {1, 4, 10, 10}, DataType::kFloat32, true);
  check_pool(Op::MaxPool, "1-D", pool_attrs({3}, {2}, {1, 1}), {2, 5, 21}, DataType::kFloat16, false);
  check_pool(Op::MaxPool, "3-D", pool_attrs({2, 2, 2}, {2, 2, 2}, {}), {1, 3, 6, 7, 8}, DataType::kFloat32, true);
  // Channel counts off the 16-byte vector (one channel per thread) and on it (8 per thread).
  for (int64_t ch : {12, 24}) {
    for (DataType dt : kFloats) {
      check_pool(Op::MaxPool, "3x3/2 " + std::to_string(ch) + " channels", pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}),
                 {2, ch, 11, 10}, dt, true);
    }
  }
}

TEST(CudaPool, AveragePool) {
  KILN_REQUIRE_GPU();
  for (DataType dt : kFloats) {
    for (bool nhwc : {false, true}) {
      check_pool(Op::AveragePool, "3x3/2 p1 exclude pad", pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 0),
                 {2, 8, 13, 13}, dt, nhwc);
      check_pool(Op::AveragePool, "3x3/2 p1 include pad", pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 1),
                 {2, 8, 13, 13}, dt, nhwc);
    }
  }
  check_pool(Op::AveragePool, "ceil + include pad", pool_attrs({3, 3}, {2, 2}, {1, 0, 1, 0}, 1, 1), {1, 4, 10, 9},
             DataType::kFloat32, false);
  check_pool(Op::AveragePool, "ceil + exclude pad", pool_attrs({3, 3}, {2, 2}, {1, 0, 1, 0}, 1, 0), {1, 4, 10, 9},
             DataType::kFloat32, true);
  Attributes sl = pool_attrs({2, 2}, {1, 1}, {}, 0, 1);
  sl.set("auto_pad", std::string("SAME_LOWER"));
  check_pool(Op::AveragePool, "SAME_LOWER include pad", sl, {1, 4, 7, 7}, DataType::kFloat32, false);
  check_pool(Op::AveragePool, "1-D", pool_attrs({4}, {3}, {}), {2, 6, 20}, DataType::kFloat32, true);
  check_pool(Op::AveragePool, "3-D", pool_attrs({3, 3, 3}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, 0, 1), {1, 2, 5, 5, 5},
             DataType::kFloat16, false);
}

TEST(CudaPool, GlobalPools) {
  KILN_REQUIRE_GPU();
  Attributes a;
  for (Op op : {Op::GlobalAveragePool, Op::GlobalMaxPool}) {
    for (DataType dt : kFloats) {
      for (bool nhwc : {false, true}) {
        check_pool(op, "resnet head 7x7", a, {2, 64, 7, 7}, dt, nhwc);
        check_pool(op, "large plane", a, {1, 3, 100, 90}, dt, nhwc);
      }
    }
    check_pool(op, "1-D", a, {3, 40, 33}, DataType::kFloat32, true);
    check_pool(op, "3-D", a, {1, 5, 4, 6, 7}, DataType::kFloat32, false);
    check_pool(op, "empty batch", a, {0, 5, 4, 6}, DataType::kFloat32, true);
  }
  check_pool(Op::MaxPool, "empty batch", pool_attrs({2, 2}, {2, 2}, {}), {0, 3, 8, 8}, DataType::kFloat32, false);
}

}  // namespace
}  // namespace kiln::testing::gpu
