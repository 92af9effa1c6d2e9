#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cpu/reference/util.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace kiln {
namespace {

TEST(Half, RoundTripsEveryFiniteHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    float f = Half::to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Half::to_float(Half::from_float(f))));
      continue;
    }
    EXPECT_EQ(Half::from_float(f), h) << "bits " << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(Half(1.0f + 1.0f / 2048)), 1.0f);             // tie -> even (down)
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even (up)
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(65520.0f))));
  EXPECT_EQ(static_cast<float>(Half(65504.0f)), 65504.0f);
  EXPECT_EQ(static_cast<float>(Half(5.96046448e-08f)), 5.96046448e-08f);  // smallest subnormal
}

TEST(BFloat16, RoundsAndKeepsSpecials) {
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(3.14159f)), 3.140625f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::infinity()))));
}

TEST(Convert, CastSemantics) {
  EXPECT_EQ(convert_element<int32_t>(-2.7f), -2);
  EXPECT_EQ(convert_element<bool>(0.5f), true);
  EXPECT_EQ(convert_element<bool>(0.0f), false);
  EXPECT_EQ(convert_element<uint8_t>(int64_t{300}), static_cast<uint8_t>(300 & 0xFF));
  EXPECT_EQ(convert_element<int32_t>(std::numeric_limits<float>::quiet_NaN()), 0);
}

TEST(Broadcast, Shapes) {
  Dims out;
  ASSERT_TRUE(broadcast_shapes({{2, 1, 4}, {3, 1}}, &out).is_ok());
  EXPECT_EQ(out, (Dims{2, 3, 4}));
  EXPECT_FALSE(broadcast_shapes({{2, 3}, {4}}, &out).is_ok());
}

TEST(Broadcast, IndexerOffsets) {
  BroadcastIndexer idx({2, 3}, {{2, 1}, {3}});
  std::vector<std::pair<int64_t, int64_t>> offs;
  idx.for_each([&](int64_t, const int64_t* o) { offs.emplace_back(o[0], o[1]); });
  std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
  EXPECT_EQ(offs, want);
}

}  // namespace
}  // namespace kiln
