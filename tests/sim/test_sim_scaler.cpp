// GradScaler semantics (torch/amp/grad_scaler.py, _amp_update_scale_), checked on sequences
// worked out by hand from the rule.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "halfway/names.hpp"
#include "halfway/sim/scaler.hpp"

using namespace halfway;
using namespace halfway::sim;

namespace {

ScalerConfig dyn(double init, double growth, double backoff, int64_t interval) {
  ScalerConfig c;
  c.kind = ScalerConfig::Kind::dynamic;
  c.init_scale = init;
  c.growth_factor = growth;
  c.backoff_factor = backoff;
  c.growth_interval = interval;
  return c;
}

}  // namespace

TEST_CASE("dynamic scale: growth after growth_interval clean steps, backoff on inf", "[sim][scaler]") {
  GradScaler s(dyn(8, 2, 0.5, 2));
  const bool pattern[] = {false, false, true, false, false, false, true, true};
  const float scale_after[] = {8, 16, 8, 8, 16, 16, 8, 4};
  const int64_t tracker_after[] = {1, 0, 0, 1, 0, 1, 0, 0};
  for (int i = 0; i < 8; ++i) {
    s.update(pattern[i]);
    CHECK(s.scale() == scale_after[i]);
    CHECK(s.growth_tracker() == tracker_after[i]);
  }
}

TEST_CASE("PyTorch's defaults", "[sim][scaler]") {
  const ScalerConfig c;
  CHECK(c.init_scale == 65536.0);
  CHECK(c.growth_factor == 2.0);
  CHECK(c.backoff_factor == 0.5);
  CHECK(c.growth_interval == 2000);
}

TEST_CASE("growth only when the grown scale is finite; tracker still resets", "[sim][scaler]") {
  const double big = std::ldexp(1.5, 127);  // 1.5·2^127: doubling overflows fp32
  GradScaler s(dyn(big, 2, 0.5, 1));
  s.update(false);
  CHECK(s.scale() == float(big));
  CHECK(s.growth_tracker() == 0);
}

TEST_CASE("no lower clamp: repeated backoff reaches zero", "[sim][scaler]") {
  GradScaler s(dyn(1, 2, 0.5, 2000));
  for (int i = 0; i < 149; ++i) s.update(true);
  CHECK(s.scale() == std::ldexp(1.0f, -149));  // smallest fp32 subnormal
  s.update(true);                               // 2^-150: a tie, rounds to even zero
  CHECK(s.scale() == 0.0f);
}

TEST_CASE("backoff computes float·double in double, then rounds to float", "[sim][scaler]") {
  // 1.3f·0.3 rounded once from double is 0.39f; the all-float product 1.3f·0.3f is one ulp
  // above (0.39000002f).
  GradScaler s(dyn(1.3, 2, 0.3, 2000));
  s.update(true);
  CHECK(s.scale() == 0.39f);
  CHECK(1.3f * 0.3f != 0.39f);
}

TEST_CASE("inv_scale is float(1/double(scale)); unscale checks the scaled values", "[sim][scaler]") {
  ScalerConfig c;
  c.kind = ScalerConfig::Kind::static_scale;
  c.scale = 3.0;
  GradScaler s(c);
  uint32_t bits;
  const float inv = s.inv_scale();
  std::memcpy(&bits, &inv, 4);
  CHECK(bits == 0x3EAAAAABu);
  std::vector<std::vector<float>> g{{3.0f, 6.0f}, {1.5f}};
  CHECK_FALSE(s.unscale(g));
  CHECK(g[0][0] == 3.0f * inv);
  CHECK(g[1][0] == 1.5f * inv);
  std::vector<std::vector<float>> h{{3.0f, std::numeric_limits<float>::infinity()}, {6.0f}};
  CHECK(s.unscale(h));
  CHECK(h[1][0] == 6.0f * inv);  // gradients are modified even on a step that is skipped
  std::vector<std::vector<float>> n{{std::nanf("")}};
  CHECK(s.unscale(n));
}

TEST_CASE("bad scaler settings are input errors", "[sim][scaler]") {
  ScalerConfig st;
  st.kind = ScalerConfig::Kind::static_scale;
  for (double v : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan(""), 1e300}) {
    st.scale = v;
    CHECK_THROWS_AS(validate(st), InputError);
  }
  CHECK_THROWS_AS(validate(dyn(65536, 1.0, 0.5, 10)), InputError);
  CHECK_THROWS_AS(validate(dyn(65536, 0.5, 0.5, 10)), InputError);
  CHECK_THROWS_AS(validate(dyn(65536, 2.0, 1.0, 10)), InputError);
  CHECK_THROWS_AS(validate(dyn(65536, 2.0, 1.5, 10)), InputError);
  CHECK_THROWS_AS(validate(dyn(65536, 2.0, 0.5, 0)), InputError);
  CHECK_THROWS_AS(validate(dyn(0, 2.0, 0.5, 10)), InputError);
  CHECK_NOTHROW(validate(dyn(65536, 2.0, 0.5, 2000)));
}
