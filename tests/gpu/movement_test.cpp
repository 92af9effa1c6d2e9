// CUDA data-movement kernels (movement.cu) against the CPU reference kernels: results must
// be bit-identical (Resize: within float tolerances).
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/fast/fast_kernel.h"

// cuda_test_util.h names TensorShape unqualified inside kiln::testing::gpu.
namespace kiln::testing::gpu {
using kiln::fast::TensorShape;
}  // namespace kiln::testing::gpu

#include "cuda_test_util.h"

namespace kiln::testing::gpu {
namespace {

// Runs `tactic` and the reference (num_outputs outputs; wanted[i] false: omitted) and
// expects identical bytes (tol < 0) or values within tol (float outputs).
void check(const std::string& tactic, Op op, const Attributes& at, const std::vector<const Tensor*>& ins,
           const std::vector<bool>& constant, const std::string& what, size_t num_outputs = 1,
           std::vector<bool> wanted = {}, double tol = -1) {
  if (wanted.empty()) wanted.assign(num_outputs, true);
  std::vector<Tensor> ref = run_ref(op, at, ins, num_outputs, wanted);
  ASSERT_EQ(ref.size(), num_outputs) << what;
  std::vector<DataType> dts;
  std::vector<TensorShape> shapes;
  for (size_t i = 0; i < num_outputs; ++i) {
    dts.push_back(wanted[i] ? ref[i].dtype() : DataType::kUndefined);
    shapes.push_back(wanted[i] ? TensorShape{ref[i].dtype(), ref[i].dims()} : TensorShape{});
  }
  CudaRun r = run_cuda(tactic, make_cuda_spec(op, &at, ins, dts, constant), ins, shapes);
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  for (size_t i = 0; i < num_outputs; ++i) {
    if (!wanted[i]) continue;
    if (tol < 0) expect_equal_tensor(r.outputs[i], ref[i], cat(what, " output ", i));
    else expect_near_tensor(to_f32(r.outputs[i]), to_f32(ref[i]), tol, cat(what, " output ", i));
  }
}

const std::vector<DataType> kByteTypes = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kBool,
                                          DataType::kBFloat16, DataType::kInt8};

TEST(CudaMovement, CopyOps) {
  KILN_REQUIRE_GPU();
  Attributes none;
  for (DataType dt : kByteTypes) {
    const std::string w = cat(" ", dtype_name(dt));
    const Tensor x = random_any(dt, {2, 3, 1, 4}, seed_for(w));
    const Tensor shape = make_int64_vector({6, -1});
    check("kiln_cuda_copy", Op::Reshape, none, {&x, &shape}, {false, true}, "Reshape" + w);
    check("kiln_cuda_copy", Op::Flatten, none, {&x}, {}, "Flatten" + w);
    const Tensor axes = make_int64_vector({2});
    check("kiln_cuda_copy", Op::Squeeze, none, {&x, &axes}, {false, true}, "Squeeze" + w);
    const Tensor uaxes = make_int64_vector({0, -1});
    check("kiln_cuda_copy", Op::Unsqueeze, none, {&x, &uaxes}, {false, true}, "Unsqueeze" + w);
    check("kiln_cuda_copy", Op::Identity, none, {&x}, {}, "Identity" + w);
  }
  const Tensor empty(DataType::kFloat32, {0, 3});
  check("kiln_cuda_copy", Op::Identity, none, {&empty}, {}, "Identity empty");
  const Tensor scalar = random_any(DataType::kFloat32, {}, 3);
  check("kiln_cuda_copy", Op::Identity, none, {&scalar}, {}, "Identity scalar");
}

TEST(CudaMovement, Transpose) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims dims;
    std::vector<int64_t> perm;  // empty: default (reverse)
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {0, 2, 1, 3}},     {{2, 3, 4, 5}, {0, 1, 3, 2}},    {{2, 3, 4, 5}, {3, 2, 1, 0}},
      {{2, 3, 4, 5}, {1, 3, 0, 2}},     {{17, 33}, {1, 0}},              {{3, 17, 33}, {}},
      {{1, 5, 1, 7}, {3, 1, 2, 0}},     {{3, 67, 129}, {0, 2, 1}},       {{1, 128, 12, 64}, {0, 2, 1, 3}},
      {{2, 16, 9, 40}, {0, 2, 3, 1}},   {{2, 40, 9, 16}, {0, 3, 1, 2}},  {{7}, {0}},
      {{4, 0, 3}, {2, 0, 1}},           {{2, 3, 4}, {-1, 0, 1}},         {{2, 3, 2, 4, 3, 5}, {5, 1, 3, 0, 4, 2}},
      {{2, 1, 3, 2, 1, 2, 3, 2}, {7, 6, 5, 4, 3, 2, 1, 0}},               {{}, {}}};
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kUInt8, DataType::kFloat16}) {
    for (const Case& c : cases) {
      Attributes a;
      if (!c.perm.empty()) a.set("perm", c.perm);
      const std::string what = cat("Transpose ", dtype_name(dt), dims_str(c.dims), " perm ", dims_str(c.perm));
      const Tensor x = random_any(dt, c.dims, seed_for(what));
      check("kiln_cuda_transpose", Op::Transpose, a, {&x}, {}, what);
    }
  }
}

TEST(CudaMovement, DepthSpace) {
  KILN_REQUIRE_GPU();
  for (const char* mode : {"DCR", "CRD"}) {
    Attributes a;
    a.set("blocksize", int64_t{2});
    a.set("mode", std::string(mode));
    const Tensor x = random_any(DataType::kFloat32, {2, 8, 3, 5}, 11);
    check("kiln_cuda_depth_to_space", Op::DepthToSpace, a, {&x}, {}, cat("DepthToSpace ", mode));
    const Tensor y = random_any(DataType::kFloat16, {2, 3, 6, 4}, 12);
    check("kiln_cuda_space_to_depth", Op::SpaceToDepth, a, {&y}, {}, cat("SpaceToDepth ", mode));
  }
}

TEST(CudaMovement, Concat) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kBool}) {
    for (int64_t axis : {0, 1, 2, -1}) {
      Dims d0 = {2, 3, 4}, d1 = {2, 3, 4}, d2 = {2, 3, 4};
      const size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
      d0[ax] = 1;
      d1[ax] = 0;  // an empty input
      d2[ax] = 5;
      Attributes a;
      a.set("axis", axis);
      const std::string what = cat("Concat ", dtype_name(dt), " axis ", axis);
      const Tensor x0 = random_any(dt, d0, seed_for(what + "0")), x1 = random_any(dt, d1, 2),
                   x2 = random_any(dt, d2, seed_for(what + "2"));
      check("kiln_cuda_concat", Op::Concat, a, {&x0, &x1, &x2}, {}, what);
    }
  }
  // Wide rows (vectorized copies) and many inputs.
  Attributes a;
  a.set("axis", int64_t{1});
  const Tensor a0 = random_any(DataType::kFloat16, {64, 256}, 1), a1 = random_any(DataType::kFloat16, {64, 512}, 2),
               a2 = random_any(DataType::kFloat16, {64, 8}, 3);
  check("kiln_cuda_concat", Op::Concat, a, {&a0, &a1, &a2, &a0}, {}, "Concat wide fp16");
}

TEST(CudaMovement, Split) {
  KILN_REQUIRE_GPU();
  Attributes a1;
  a1.set("axis", int64_t{1});
  const Tensor x = random_any(DataType::kFloat32, {2, 5, 3}, 5);
  const Tensor sizes = make_int64_vector({2, 3, 0});  // an empty output
  check("kiln_cuda_split", Op::Split, a1, {&x, &sizes}, {false, true}, "Split sizes [2,3,0]", 3);
  check("kiln_cuda_split", Op::Split, a1, {&x, &sizes}, {false, false}, "Split runtime sizes", 3);
  check("kiln_cuda_split", Op::Split, a1, {&x, &sizes}, {false, true}, "Split omitted output", 3, {true, false, true});
  Attributes an;
  an.set("axis", int64_t{-1});
  an.set("num_outputs", int64_t{3});
  const Tensor y = random_any(DataType::kFloat16, {4, 7}, 6);
  check("kiln_cuda_split", Op::Split, an, {&y}, {}, "Split num_outputs 3 of 7", 3);
  Attributes a0;
  const Tensor z = random_any(DataType::kInt64, {6, 4}, 7);
  check("kiln_cuda_split", Op::Split, a0, {&z}, {}, "Split even axis 0", 2);
  Attributes aq;
  aq.set("axis", int64_t{2});
  const Tensor q = random_any(DataType::kBFloat16, {2, 8, 3 * 128}, 8);  // fused QKV
  check("kiln_cuda_split", Op::Split, aq, {&q}, {}, "Split QKV", 3);
}

TEST(CudaMovement, Slice) {
  KILN_REQUIRE_GPU();
  Attributes none;
  struct Case {
    Dims dims;
    std::vector<int64_t> starts, ends, axes, steps;  // axes/steps empty: omitted
  };
  const std::vector<Case> cases = {
      {{4, 6, 8}, {1, 2}, {3, 6}, {0, 2}, {}},
      {{4, 6, 8}, {-1}, {-100}, {1}, {-2}},          // negative step, from the end
      {{4, 6, 8}, {0, 7}, {4, -100}, {0, -1}, {1, -1}},  // reverse the last axis
      {{4, 6, 8}, {1, 1, 1}, {100, 100, 100}, {}, {2, 3, 2}},
      {{4, 6, 8}, {5}, {9}, {2}, {}},               // empty result
      {{10}, {-3}, {100}, {}, {}},
      {{2, 128, 64}, {0, 0}, {64, 32}, {2, 1}, {}},  // contiguous rows
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    for (const Case& c : cases) {
      const std::string what = cat("Slice ", dtype_name(dt), dims_str(c.dims), " starts ", dims_str(c.starts), " ends ",
                                   dims_str(c.ends), " axes ", dims_str(c.axes), " steps ", dims_str(c.steps));
      const Tensor x = random_any(dt, c.dims, seed_for(what));
      const Tensor st = make_int64_vector(c.starts), en = make_int64_vector(c.ends), ax = make_int64_vector(c.axes),
                   sp = make_int64_vector(c.steps);
      const Tensor* axp = c.axes.empty() && !c.steps.empty() ? nullptr : &ax;
      std::vector<const Tensor*> ins = {&x, &st, &en};
      if (!c.axes.empty() || !c.steps.empty()) ins.push_back(axp);
      if (!c.steps.empty()) ins.push_back(&sp);
      check("kiln_cuda_slice", Op::Slice, none, ins, {false, true, true, true, true}, what);
      check("kiln_cuda_slice", Op::Slice, none, ins, {false, true, false, true, true}, what + " (runtime ends)");
    }
  }
}

TEST(CudaMovement, Gather) {
  KILN_REQUIRE_GPU();
  // Embedding lookup: [V, H] along axis 0 with negative indices.
  for (DataType dt : {DataType::kFloat16, DataType::kFloat32, DataType::kBFloat16}) {
    Attributes a;
    const Tensor table = random_any(dt, {100, 64}, 21);
    const Tensor ids = make_tensor<int64_t>({2, 5}, {0, 1, 99, -1, -100, 50, 7, 7, 3, 98});
    check("kiln_cuda_gather", Op::Gather, a, {&table, &ids}, {}, cat("Gather embedding ", dtype_name(dt)));
    const Tensor ids32 = make_tensor<int32_t>({3}, {5, -2, 0});
    check("kiln_cuda_gather", Op::Gather, a, {&table, &ids32}, {}, cat("Gather int32 ", dtype_name(dt)));
  }
  for (int64_t axis : {1, -1, 2}) {
    Attributes a;
    a.set("axis", axis);
    const Tensor x = random_any(DataType::kInt64, {3, 4, 5}, 22);
    const Tensor ids = make_tensor<int64_t>({2, 2}, {0, -1, 2, 1});
    check("kiln_cuda_gather", Op::Gather, a, {&x, &ids}, {}, cat("Gather axis ", axis));
  }
  Attributes a;
  const Tensor x = random_any(DataType::kFloat32, {6}, 23);
  const Tensor scalar_idx = make_tensor<int64_t>({}, {-2});
  check("kiln_cuda_gather", Op::Gather, a, {&x, &scalar_idx}, {}, "Gather scalar index");
  const Tensor no_idx(DataType::kInt64, {0});
  check("kiln_cuda_gather", Op::Gather, a, {&x, &no_idx}, {}, "Gather no indices");
}

TEST(CudaMovement, GatherOutOfRangeWritesZeros) {
  KILN_REQUIRE_GPU();
  Attributes a;
  const Tensor table = random_any(DataType::kFloat32, {4, 8}, 31);
  const Tensor ids = make_tensor<int64_t>({3}, {1, 4, -5});
  auto spec = make_cuda_spec(Op::Gather, &a, {&table, &ids}, {DataType::kFloat32});
  CudaRun r = run_cuda("kiln_cuda_gather", spec, {&table, &ids}, {TensorShape{DataType::kFloat32, {3, 8}}});
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  const float* y = r.outputs[0].data<float>();
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(y[j], table.data<float>()[8 + j]) << j;
    EXPECT_EQ(y[8 + j], 0.0f) << j;
    EXPECT_EQ(y[16 + j], 0.0f) << j;
  }
}

TEST(CudaMovement, ExpandTile) {
  KILN_REQUIRE_GPU();
  Attributes none;
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kBool}) {
    const Tensor x = random_any(dt, {3, 1}, 41);
    const Tensor shape = make_int64_vector({2, 1, 4});
    check("kiln_cuda_expand", Op::Expand, none, {&x, &shape}, {false, true}, cat("Expand [3,1]->[2,3,4] ", dtype_name(dt)));
    check("kiln_cuda_expand", Op::Expand, none, {&x, &shape}, {false, false}, cat("Expand runtime shape ", dtype_name(dt)));
    const Tensor y = random_any(dt, {1, 5, 1, 3}, 42);
    const Tensor shape2 = make_int64_vector({2, 1, 6, 1});
    check("kiln_cuda_expand", Op::Expand, none, {&y, &shape2}, {false, true}, cat("Expand 4-D ", dtype_name(dt)));
    const Tensor t = random_any(dt, {2, 3, 4}, 43);
    const Tensor reps = make_int64_vector({2, 1, 3});
    check("kiln_cuda_tile", Op::Tile, none, {&t, &reps}, {false, true}, cat("Tile ", dtype_name(dt)));
  }
  const Tensor e = random_any(DataType::kFloat32, {0, 3}, 44);
  const Tensor reps = make_int64_vector({3, 2});
  check("kiln_cuda_tile", Op::Tile, none, {&e, &reps}, {false, true}, "Tile empty");
}

TEST(CudaMovement, Pad) {
  KILN_REQUIRE_GPU();
  struct Case {
    const char* mode;
    Dims dims;
    std::vector<int64_t> pads, axes;
  };
  const std::vector<Case> cases = {
      {"constant", {2, 3, 4}, {0, 1, 2, 0, 2, 1}, {}},
      {"constant", {2, 3, 4}, {1, -1, 2, 0}, {0, -1}},
      {"constant", {1, 3, 5, 5}, {0, 0, 1, 1, 0, 0, 1, 1}, {}},
      {"edge", {2, 3, 4}, {0, 2, 3, 1, 0, 2}, {}},
      {"reflect", {2, 3, 4}, {0, 2, 3, 0, 2, 3}, {}},
      {"reflect", {2, 1, 4}, {0, 2, 1, 0, 1, 2}, {}},
      {"wrap", {2, 3, 4}, {1, 2, 5, 0, 2, 3}, {}},
      {"edge", {2, 5}, {-1, 2, 0, -2}, {}},
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    for (const Case& c : cases) {
      Attributes a;
      a.set("mode", std::string(c.mode));
      const std::string what = cat("Pad ", c.mode, " ", dtype_name(dt), dims_str(c.dims), " pads ", dims_str(c.pads),
                                   " axes ", dims_str(c.axes));
      const Tensor x = random_any(dt, c.dims, seed_for(what));
      const Tensor pads = make_int64_vector(c.pads);
      const Tensor value = random_any(dt, {}, 7);
      const Tensor axes = make_int64_vector(c.axes);
      if (c.axes.empty()) {
        check("kiln_cuda_pad", Op::Pad, a, {&x, &pads}, {false, true}, what);
        check("kiln_cuda_pad", Op::Pad, a, {&x, &pads, &value}, {false, true, false}, what + " value");
      } else {
        check("kiln_cuda_pad", Op::Pad, a, {&x, &pads, &value, &axes}, {false, true, false, true}, what + " value");
      }
    }
  }
}

TEST(CudaMovement, Resize) {
  KILN_REQUIRE_GPU();
  struct Case {
    const char* mode;
    const char* coord;
    const char* nearest;
    std::vector<float> scales;   // empty: sizes
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {
      {"nearest", "asymmetric", "floor", {1, 1, 2, 2}, {}},
      {"nearest", "half_pixel", "round_prefer_floor", {1, 1, 1.5f, 0.5f}, {}},
      {"nearest", "align_corners", "round_prefer_ceil", {}, {2, 3, 7, 9}},
      {"nearest", "tf_half_pixel_for_nn", "ceil", {1, 1, 3, 3}, {}},
      {"linear", "half_pixel", "round_prefer_floor", {1, 1, 2, 2}, {}},
      {"linear", "half_pixel", "round_prefer_floor", {1, 1, 0.5f, 0.5f}, {}},
      {"linear", "align_corners", "round_prefer_floor", {}, {2, 3, 11, 4}},
      {"linear", "pytorch_half_pixel", "round_prefer_floor", {}, {2, 3, 1, 13}},
      {"linear", "asymmetric", "round_prefer_floor", {1, 1, 1.7f, 0.6f}, {}},
      {"cubic", "half_pixel", "round_prefer_floor", {1, 1, 2, 2}, {}},
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    for (const Case& c : cases) {
      Attributes a;
      a.set("mode", std::string(c.mode));
      a.set("coordinate_transformation_mode", std::string(c.coord));
      a.set("nearest_mode", std::string(c.nearest));
      const std::string what = cat("Resize ", c.mode, " ", c.coord, " ", c.nearest, " ", dtype_name(dt));
      const Tensor x = convert(random_f32({2, 3, 6, 8}, seed_for(what)), dt);
      const double tol = dt == DataType::kFloat32 ? 1e-5 : 2e-2;
      if (!c.scales.empty()) {
        const Tensor scales = make_tensor<float>({4}, c.scales);
        check("kiln_cuda_resize", Op::Resize, a, {&x, nullptr, &scales}, {false, false, true},
              what + " scales " + dims_str(std::vector<int64_t>(c.scales.begin(), c.scales.end())), 1, {}, tol);
      } else {
        const Tensor sizes = make_int64_vector(c.sizes);
        check("kiln_cuda_resize", Op::Resize, a, {&x, nullptr, nullptr, &sizes}, {false, false, false, true},
              what + " sizes " + dims_str(c.sizes), 1, {}, tol);
      }
    }
  }
  // Antialiased linear downscale (many taps).
  Attributes a;
  a.set("mode", std::string("linear"));
  a.set("antialias", int64_t{1});
  const Tensor x = random_f32({1, 2, 16, 20}, 51);
  const Tensor scales = make_tensor<float>({4}, {1, 1, 0.25f, 0.5f});
  check("kiln_cuda_resize", Op::Resize, a, {&x, nullptr, &scales}, {false, false, true}, "Resize antialias", 1, {}, 1e-5);
}

TEST(CudaMovement, Declines) {
  KILN_REQUIRE_GPU();
  Attributes none;
  const Tensor x = random_f32({2, 3}, 1);
  const Tensor st = make_int64_vector({0}), en = make_int64_vector({1});
  // Slice with runtime starts: declined.
  auto s = make_cuda_spec(Op::Slice, &none, {&x, &st, &en}, {DataType::kFloat32}, {false, false, true});
  EXPECT_FALSE(cuda_tactic_for("kiln_cuda_slice", Op::Slice)->supports(s));
  // Resize on a leading axis / tf_crop_and_resize: declined.
  Attributes ra;
  ra.set("mode", std::string("nearest"));
  const Tensor x4 = random_f32({1, 2, 3, 4}, 2);
  const Tensor sc = make_tensor<float>({4}, {2, 1, 1, 1});
  auto rs = make_cuda_spec(Op::Resize, &ra, {&x4, nullptr, &sc}, {DataType::kFloat32}, {false, false, true});
  EXPECT_FALSE(cuda_tactic_for("kiln_cuda_resize", Op::Resize)->supports(rs));
  ra.set("coordinate_transformation_mode", std::string("tf_crop_and_resize"));
  const Tensor sc2 = make_tensor<float>({4}, {1, 1, 2, 2});
  auto rs2 = make_cuda_spec(Op::Resize, &ra, {&x4, nullptr, &sc2}, {DataType::kFloat32}, {false, false, true});
  EXPECT_FALSE(cuda_tactic_for("kiln_cuda_resize", Op::Resize)->supports(rs2));
  // Strings are not moved.
  Tensor str(DataType::kString, {2});
  auto cs = make_cuda_spec(Op::Identity, &none, {&str}, {DataType::kString});
  EXPECT_FALSE(cuda_tactic_for("kiln_cuda_copy", Op::Identity)->supports(cs));
}

}  // namespace
}  // namespace kiln::testing::gpu
