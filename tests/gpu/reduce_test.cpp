// CUDA reductions (reduce.cu) against the CPU reference kernels: Reduce* within float
// tolerances (exact for integers and Max/Min), ArgMax/ArgMin exactly.
#include <cmath>
#include <functional>
#include <limits>
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

double tol_for(DataType dt) { return dt == DataType::kFloat32 ? 1e-5 : dt == DataType::kFloat16 ? 1e-2 : 5e-2; }

// Runs `tactic` against the reference; tol < 0: exact.
void check(const std::string& tactic, Op op, const Attributes& at, const std::vector<const Tensor*>& ins,
           const std::vector<bool>& constant, const std::string& what, double tol) {
  std::vector<Tensor> ref = run_ref(op, at, ins, 1);
  ASSERT_EQ(ref.size(), 1u) << what;
  CudaRun r = run_cuda(tactic, make_cuda_spec(op, &at, ins, {ref[0].dtype()}, constant), ins, shapes_of(ref));
  ASSERT_TRUE(r.status.is_ok()) << what << ": " << r.status.message();
  if (tol < 0) expect_equal_tensor(r.outputs[0], ref[0], what);
  else expect_near_tensor(to_f32(r.outputs[0]), to_f32(ref[0]), tol, what);
}

const std::vector<Op> kFloatOps = {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax,       Op::ReduceMin,
                                   Op::ReduceProd, Op::ReduceL1,  Op::ReduceL2,        Op::ReduceLogSum,
                                   Op::ReduceLogSumExp, Op::ReduceSumSquare};

struct Geometry {
  Dims dims;
  std::vector<int64_t> axes;  // empty: all (or none with noop)
};

// Covers the rows (short and long rows), split, mid and general paths.
const std::vector<Geometry> kGeometries = {
    {{4, 37}, {1}},            // rows, warp per row
    {{3, 5000}, {-1}},         // rows, block per row
    {{2, 70000}, {1}},         // rows, split over K
    {{2, 8, 6, 7}, {2, 3}},    // spatial mean of NCHW
    {{2, 9, 40}, {1}},         // middle axis
    {{50, 3}, {0}},            // leading axis
    {{3, 4, 5, 6}, {0, 2}},    // general
    {{3, 4, 5}, {1, 0, 2}},    // everything, unordered
    {{17}, {}},                // rank 1, all axes
    {{2, 1, 3}, {1}},          // size-1 axis
};

TEST(CudaReduce, FloatOps) {
  KILN_REQUIRE_GPU();
  for (Op op : kFloatOps) {
    for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
      for (const Geometry& g : kGeometries) {
        if (op == Op::ReduceProd && num_elements(g.dims) > 2000) continue;  // products overflow
        for (int64_t keep : {0, 1}) {
          Attributes a;
          a.set("keepdims", keep);
          const std::string what = cat(op_name(op), " ", dtype_name(dt), dims_str(g.dims), " axes ", dims_str(g.axes),
                                       " keepdims ", keep);
          // Prod: values near 1 so that products stay finite; LogSum: positive inputs.
          Tensor xf = op == Op::ReduceProd ? uniform_f32(g.dims, seed_for(what), 0.9f, 1.1f)
                      : op == Op::ReduceLogSum ? uniform_f32(g.dims, seed_for(what), 0.1f, 2.0f)
                                               : random_f32(g.dims, seed_for(what));
          const Tensor x = convert(xf, dt);
          const Tensor axes = make_int64_vector(g.axes);
          if (g.axes.empty()) check("kiln_cuda_reduce", op, a, {&x}, {}, what, tol_for(dt));
          else check("kiln_cuda_reduce", op, a, {&x, &axes}, {false, true}, what, tol_for(dt));
        }
      }
    }
  }
}

TEST(CudaReduce, BFloat16) {
  KILN_REQUIRE_GPU();
  for (Op op : {Op::ReduceMean, Op::ReduceMax, Op::ReduceSum}) {
    Attributes a;
    const Tensor x = convert(random_f32({4, 300}, 3), DataType::kBFloat16);
    const Tensor axes = make_int64_vector({-1});
    check("kiln_cuda_reduce", op, a, {&x, &axes}, {false, true}, cat(op_name(op), " bf16"), 5e-2);
  }
}

TEST(CudaReduce, Integers) {
  KILN_REQUIRE_GPU();
  for (Op op : {Op::ReduceSum, Op::ReduceMax, Op::ReduceMin}) {
    for (DataType dt : {DataType::kInt32, DataType::kInt64}) {
      for (const Geometry& g : kGeometries) {
        Attributes a;
        const std::string what = cat(op_name(op), " ", dtype_name(dt), dims_str(g.dims), " axes ", dims_str(g.axes));
        const Tensor x = cast_tensor(uniform_f32(g.dims, seed_for(what), -1000.f, 1000.f), dt);
        const Tensor axes = make_int64_vector(g.axes);
        if (g.axes.empty()) check("kiln_cuda_reduce", op, a, {&x}, {}, what, -1);
        else check("kiln_cuda_reduce", op, a, {&x, &axes}, {false, true}, what, -1);
      }
    }
  }
}

TEST(CudaReduce, EdgeCases) {
  KILN_REQUIRE_GPU();
  // noop_with_empty_axes: elementwise.
  for (Op op : {Op::ReduceSumSquare, Op::ReduceL2, Op::ReduceLogSumExp}) {
    Attributes a;
    a.set("noop_with_empty_axes", int64_t{1});
    const Tensor x = random_f32({3, 4}, 5);
    check("kiln_cuda_reduce", op, a, {&x}, {}, cat(op_name(op), " noop_with_empty_axes"), 1e-5);
  }
  // Empty reduced axis: Sum 0, Max -inf, Mean NaN, Prod 1.
  for (Op op : {Op::ReduceSum, Op::ReduceMax, Op::ReduceMean, Op::ReduceProd, Op::ReduceLogSumExp}) {
    Attributes a;
    const Tensor x(DataType::kFloat32, {3, 0});
    const Tensor axes = make_int64_vector({1});
    check("kiln_cuda_reduce", op, a, {&x, &axes}, {false, true}, cat(op_name(op), " over an empty axis"), 1e-5);
  }
  // Empty output.
  {
    Attributes a;
    const Tensor x(DataType::kFloat32, {0, 4});
    const Tensor axes = make_int64_vector({1});
    check("kiln_cuda_reduce", Op::ReduceSum, a, {&x, &axes}, {false, true}, "ReduceSum empty output", 1e-5);
  }
  // Rank 0.
  {
    Attributes a;
    const Tensor x = random_f32({}, 6);
    check("kiln_cuda_reduce", Op::ReduceMean, a, {&x}, {}, "ReduceMean scalar", 1e-5);
  }
  // NaN and inf propagate.
  {
    Attributes a;
    Tensor x = random_f32({2, 6}, 7);
    x.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[8] = std::numeric_limits<float>::infinity();
    const Tensor axes = make_int64_vector({1});
    for (Op op : {Op::ReduceMax, Op::ReduceMin, Op::ReduceLogSumExp, Op::ReduceSum}) {
      check("kiln_cuda_reduce", op, a, {&x, &axes}, {false, true}, cat(op_name(op), " NaN/inf"), 1e-5);
    }
  }
  // Runtime axes: declined.
  {
    Attributes a;
    const Tensor x = random_f32({2, 3}, 8);
    const Tensor axes = make_int64_vector({1});
    auto spec = make_cuda_spec(Op::ReduceSum, &a, {&x, &axes}, {DataType::kFloat32}, {false, false});
    EXPECT_FALSE(cuda_tactic_for("kiln_cuda_reduce", Op::ReduceSum)->supports(spec));
    const Tensor xi = cast_tensor(x, DataType::kInt64);
    auto spec2 = make_cuda_spec(Op::ReduceMean, &a, {&xi, &axes}, {DataType::kInt64}, {false, true});
    EXPECT_FALSE(cuda_tactic_for("kiln_cuda_reduce", Op::ReduceMean)->supports(spec2));
  }
}

TEST(CudaReduce, ArgMaxArgMin) {
  KILN_REQUIRE_GPU();
  struct Case {
    Dims dims;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{4, 50}, -1}, {{4, 3000}, 1}, {{3, 7, 5}, 1}, {{6, 4}, 0}, {{9}, 0}, {{2, 3, 4}, 0}};
  for (Op op : {Op::ArgMax, Op::ArgMin}) {
    for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kInt32}) {
      for (const Case& c : cases) {
        for (int64_t keep : {0, 1}) {
          for (int64_t last : {0, 1}) {
            Attributes a;
            a.set("axis", c.axis);
            a.set("keepdims", keep);
            a.set("select_last_index", last);
            const std::string what = cat(op_name(op), " ", dtype_name(dt), dims_str(c.dims), " axis ", c.axis,
                                         " keepdims ", keep, " last ", last);
            // Few distinct values, so that ties happen.
            Tensor xf = uniform_f32(c.dims, seed_for(what), -4.f, 4.f);
            for (int64_t i = 0; i < xf.size(); ++i) xf.data<float>()[i] = std::floor(xf.data<float>()[i]);
            const Tensor x = convert(xf, dt);
            check(op == Op::ArgMax ? "kiln_cuda_argmax" : "kiln_cuda_argmin", op, a, {&x}, {}, what, -1);
          }
        }
      }
    }
  }
  // NaN wins.
  for (int64_t last : {0, 1}) {
    Attributes a;
    a.set("axis", int64_t{1});
    a.set("select_last_index", last);
    Tensor x = random_f32({2, 40}, 9);
    x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[33] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[60] = std::numeric_limits<float>::quiet_NaN();
    check("kiln_cuda_argmax", Op::ArgMax, a, {&x}, {}, cat("ArgMax NaN last ", last), -1);
    check("kiln_cuda_argmin", Op::ArgMin, a, {&x}, {}, cat("ArgMin NaN last ", last), -1);
  }
}

}  // namespace
}  // namespace kiln::testing::gpu
