// Fast data-movement kernels (kiln_copy, kiln_transpose, kiln_concat, kiln_split,
// kiln_gather, kiln_slice, kiln_cast) against the reference kernels: results must be
// bit-identical.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/fast/geometry.h"
#include "fast_kernel_test_util.h"

namespace kiln::testing::fast {
namespace {

// Runs `tactic` and the reference with `num_outputs` outputs (wanted[i] false: omitted
// in the spec) and expects identical bytes.
void check(const std::string& tactic, Op op, const Attributes& at, const std::vector<const Tensor*>& ins,
           const std::vector<bool>& constant, const std::string& what, size_t num_outputs = 1,
           std::vector<bool> wanted = {}) {
  if (wanted.empty()) wanted.assign(num_outputs, true);
  std::vector<Tensor> ref = run_ref(op, at, ins, num_outputs, wanted);
  std::vector<DataType> dts;
  std::vector<TensorShape> shapes;
  for (size_t i = 0; i < num_outputs; ++i) {
    dts.push_back(wanted[i] ? ref[i].dtype() : DataType::kUndefined);
    shapes.push_back(wanted[i] ? TensorShape{ref[i].dtype(), ref[i].dims()} : TensorShape{});
  }
  FastRun r = run_fast(tactic, make_spec(op, &at, ins, dts, constant), ins, shapes);
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  for (size_t i = 0; i < num_outputs; ++i) {
    if (wanted[i]) expect_equal_tensor(r.outputs[i], ref[i], cat(what, " output ", i));
  }
}

TEST(FastMovement, CopyOps) {
  Attributes none;
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kBool, DataType::kFloat16}) {
    const Tensor x = random_any(dt, {2, 3, 1, 4}, fresh_seed());
    const Tensor shape = make_int64_vector({6, -1});
    check("kiln_copy", Op::Reshape, none, {&x, &shape}, {false, true}, cat("Reshape ", dtype_name(dt)));
    check("kiln_copy", Op::Flatten, none, {&x}, {}, "Flatten");
    const Tensor axes = make_int64_vector({2});
    check("kiln_copy", Op::Squeeze, none, {&x, &axes}, {false, true}, "Squeeze");
    const Tensor uaxes = make_int64_vector({0, -1});
    check("kiln_copy", Op::Unsqueeze, none, {&x, &uaxes}, {false, true}, "Unsqueeze");
    check("kiln_copy", Op::Identity, none, {&x}, {}, "Identity");
  }
  const Tensor big = random_f32({1024, 1024}, fresh_seed());
  check("kiln_copy", Op::Identity, none, {&big}, {}, "Identity 4 MiB (threads)");
}

TEST(FastMovement, Transpose) {
  struct Case {
    Dims dims;
    std::vector<int64_t> perm;  // empty: default (reverse)
  };
  const std::vector<Case> cases = {{{2, 3, 4, 5}, {0, 2, 1, 3}}, {{2, 3, 4, 5}, {0, 1, 3, 2}}, {{2, 3, 4, 5}, {3, 2, 1, 0}},
                                   {{2, 3, 4, 5}, {1, 3, 0, 2}}, {{17, 33}, {1, 0}},           {{3, 17, 33}, {}},
                                   {{1, 5, 1, 7}, {3, 1, 2, 0}}, {{64, 128, 64}, {0, 2, 1}},   {{1, 128, 12, 64}, {0, 2, 1, 3}},
                                   {{7}, {0}},                   {{4, 0, 3}, {2, 0, 1}},       {{2, 3, 4}, {-1, 0, 1}}};
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kUInt8, DataType::kFloat16}) {
    for (const Case& c : cases) {
      Attributes a;
      if (!c.perm.empty()) a.set("perm", c.perm);
      const Tensor x = random_any(dt, c.dims, fresh_seed());
      check("kiln_transpose", Op::Transpose, a, {&x}, {}, cat("Transpose ", dtype_name(dt), dims_str(c.dims), dims_str(c.perm)));
    }
  }
}

TEST(FastMovement, ConcatAndSplit) {
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kUInt8}) {
    const Tensor a = random_any(dt, {2, 3, 5}, fresh_seed()), b = random_any(dt, {2, 1, 5}, fresh_seed()),
                 c = random_any(dt, {2, 4, 5}, fresh_seed());
    Attributes ax1;
    ax1.set("axis", int64_t{1});
    check("kiln_concat", Op::Concat, ax1, {&a, &b, &c}, {}, cat("Concat axis 1 ", dtype_name(dt)));
    Attributes ax0;
    ax0.set("axis", int64_t{0});
    check("kiln_concat", Op::Concat, ax0, {&a, &a}, {}, "Concat axis 0");
    Attributes axm;
    axm.set("axis", int64_t{-1});
    const Tensor d = random_any(dt, {2, 3, 2}, fresh_seed());
    check("kiln_concat", Op::Concat, axm, {&a, &d}, {}, "Concat axis -1");

    const Tensor x = random_any(dt, {4, 9, 3}, fresh_seed());
    const Tensor sizes = make_int64_vector({2, 3, 4});
    check("kiln_split", Op::Split, ax1, {&x, &sizes}, {false, true}, "Split sizes", 3);
    check("kiln_split", Op::Split, ax1, {&x, &sizes}, {false, false}, "Split sizes (input not constant)", 3);
    check("kiln_split", Op::Split, ax1, {&x, &sizes}, {false, true}, "Split, middle output omitted", 3,
          {true, false, true});
    check("kiln_split", Op::Split, ax1, {&x}, {}, "Split even", 3);
    Attributes numo = ax1;
    numo.set("num_outputs", int64_t{4});
    check("kiln_split", Op::Split, numo, {&x}, {}, "Split num_outputs", 4, {true, true, false, true});
  }
  // An omitted output whose size only a non-constant split input tells: not supported.
  const Tensor x = random_f32({4, 9}, 1);
  const Tensor sizes = make_int64_vector({2, 7});
  Attributes ax1;
  ax1.set("axis", int64_t{1});
  EXPECT_FALSE(tactic_supports("kiln_split", make_spec(Op::Split, &ax1, {&x, &sizes},
                                                       {DataType::kFloat32, DataType::kUndefined}, {false, false})));
}

TEST(FastMovement, Gather) {
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16, DataType::kBool}) {
    const Tensor x = random_any(dt, {7, 5, 3}, fresh_seed());
    const Tensor i64 = make_tensor<int64_t>({2, 3}, {0, 6, -1, 3, -7, 2});
    const Tensor i32 = make_tensor<int32_t>({4}, {4, 0, -2, 1});
    const Tensor scalar = make_tensor<int64_t>({}, {2});
    Attributes a0, a1, a2;
    a1.set("axis", int64_t{1});
    a2.set("axis", int64_t{-1});
    check("kiln_gather", Op::Gather, a0, {&x, &i64}, {}, cat("Gather axis 0 ", dtype_name(dt)));
    check("kiln_gather", Op::Gather, a1, {&x, &i32}, {}, "Gather axis 1 int32");
    check("kiln_gather", Op::Gather, a2, {&x, &scalar}, {}, "Gather last axis scalar index");
  }
  // An embedding table lookup big enough for threads.
  const Tensor table = random_f32({1000, 768}, fresh_seed());
  Tensor ids(DataType::kInt64, {1, 128});
  for (int64_t i = 0; i < 128; ++i) ids.data<int64_t>()[i] = (i * 37) % 1000;
  check("kiln_gather", Op::Gather, {}, {&table, &ids}, {}, "embedding");
  // Out-of-range index: run() fails cleanly.
  const Tensor bad = make_tensor<int64_t>({1}, {7});
  const Tensor x = random_f32({7, 2}, 1);
  Attributes none;
  FastRun r = run_fast("kiln_gather", make_spec(Op::Gather, &none, {&x, &bad}, {DataType::kFloat32}), {&x, &bad},
                       {{DataType::kFloat32, {1, 2}}});
  EXPECT_FALSE(r.status.is_ok());
}

TEST(FastMovement, Slice) {
  struct Case {
    Dims dims;
    std::vector<int64_t> starts, ends, axes, steps;  // axes/steps empty: omitted
  };
  const std::vector<Case> cases = {
      {{10, 20}, {1, -5}, {8, 100}, {0, 1}, {2, 1}},
      {{10, 20}, {9}, {-100}, {0}, {-3}},
      {{10, 20}, {2, 3}, {5, 17}, {}, {}},
      {{4, 6, 8}, {1}, {7}, {-1}, {3}},
      {{4, 6, 8}, {0, 5}, {4, 0}, {0, 1}, {1, -2}},
      {{4, 6, 8}, {1, 1, 1}, {2, 5, 8}, {0, 1, 2}, {}},
      {{5, 7}, {3}, {3}, {1}, {}},  // empty
  };
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kUInt8}) {
    for (const Case& c : cases) {
      const Tensor x = random_any(dt, c.dims, fresh_seed());
      const Tensor starts = make_int64_vector(c.starts), ends = make_int64_vector(c.ends);
      const Tensor axes = make_int64_vector(c.axes);
      const Tensor steps = make_tensor<int32_t>({static_cast<int64_t>(c.steps.size())},
                                                std::vector<int32_t>(c.steps.begin(), c.steps.end()));
      std::vector<const Tensor*> ins = {&x, &starts, &ends};
      if (!c.axes.empty()) ins.push_back(&axes);
      if (!c.steps.empty()) {
        if (c.axes.empty()) ins.push_back(nullptr);
        ins.push_back(&steps);
      }
      std::vector<bool> constant(ins.size(), true);
      constant[0] = false;
      Attributes none;
      check("kiln_slice", Op::Slice, none, ins, constant, cat("Slice ", dtype_name(dt), dims_str(c.dims), dims_str(c.starts)));
    }
  }
  const Tensor x = random_f32({4, 4}, 1);
  const Tensor s = make_int64_vector({1}), e = make_int64_vector({3});
  Attributes none;
  EXPECT_FALSE(tactic_supports("kiln_slice", make_spec(Op::Slice, &none, {&x, &s, &e}, {DataType::kFloat32}, {false, false, true})));
  EXPECT_TRUE(tactic_supports("kiln_slice", make_spec(Op::Slice, &none, {&x, &s, &e}, {DataType::kFloat32}, {false, true, false})));
}

// The host-side geometry the fast and CUDA kernels share (backends/cpu/fast/geometry.h),
// at the edges the kernel tests above do not reach.
TEST(FastMovement, SharedGeometry) {
  using kiln::fast::concat_split_extents;
  using kiln::fast::slice_geometry;
  Dims strides;
  int64_t offset = -1;
  // X [4, 6], rows 1..2 and column 5: a sliced axis of one element gets stride 0.
  ASSERT_TRUE(slice_geometry({4, 6}, {2, 1}, {1, 5}, {3, 6}, {}, {}, &strides, &offset).is_ok());
  EXPECT_EQ(strides, (Dims{6, 0}));
  EXPECT_EQ(offset, 11);
  // An empty output reads nothing.
  ASSERT_TRUE(slice_geometry({4, 6}, {0, 6}, {2}, {}, {}, {}, &strides, &offset).is_ok());
  EXPECT_EQ(offset, 0);
  // More than one element with |step| >= the axis cannot fit; rejected before the last
  // position (1 + 2 * 2^62 here) is computed.
  EXPECT_FALSE(slice_geometry({4, 6}, {3, 6}, {1}, {}, {}, {int64_t{1} << 62}, &strides, &offset).is_ok());
  EXPECT_FALSE(slice_geometry({4, 6}, {-1, 6}, {1}, {}, {}, {}, &strides, &offset).is_ok());

  // Split: an omitted output's size comes from the split sizes, which must not be negative
  // even when they add up.
  std::vector<int64_t> along;
  const std::vector<TensorShape> parts = {TensorShape{}, TensorShape{DataType::kFloat32, {3, 5}}};
  EXPECT_FALSE(concat_split_extents(true, {2, 5}, 0, parts, {-1, 3}, false, &along).is_ok());
  ASSERT_TRUE(concat_split_extents(true, {5, 5}, 0, parts, {2, 3}, false, &along).is_ok());
  EXPECT_EQ(along, (std::vector<int64_t>{2, 3}));
}

TEST(FastMovement, Cast) {
  Tensor f = random_f32({3, 1001}, fresh_seed(), 0.01f, 1e5f);
  const float inf = std::numeric_limits<float>::infinity();
  f.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  f.data<float>()[1] = inf;
  f.data<float>()[2] = -inf;
  f.data<float>()[3] = 3e9f;
  f.data<float>()[4] = 0.0f;
  const std::vector<DataType> types = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64,
                                       DataType::kInt64,   DataType::kInt32,   DataType::kInt8,     DataType::kUInt8,
                                       DataType::kBool};
  for (DataType from : types) {
    const Tensor x = from == DataType::kFloat32 ? f : cast_tensor(f, from);
    for (DataType to : types) {
      Attributes a;
      a.set("to", static_cast<int64_t>(to));
      check("kiln_cast", Op::Cast, a, {&x}, {}, cat("Cast ", dtype_name(from), " -> ", dtype_name(to)));
    }
  }
  const Tensor like(DataType::kInt32, {1});
  check("kiln_cast", Op::Cast, {}, {&f, &like}, {}, "CastLike");
  Attributes to_str;
  to_str.set("to", static_cast<int64_t>(DataType::kString));
  EXPECT_FALSE(tactic_supports("kiln_cast", make_spec(Op::Cast, &to_str, {&f}, {DataType::kString})));
  Attributes to_fp8;
  to_fp8.set("to", static_cast<int64_t>(DataType::kFloat8E4M3FN));
  EXPECT_FALSE(tactic_supports("kiln_cast", make_spec(Op::Cast, &to_fp8, {&f}, {DataType::kFloat8E4M3FN})));
}

}  // namespace
}  // namespace kiln::testing::fast
