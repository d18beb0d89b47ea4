// halfway/cpu.hpp: one detection, one mask, one override for users (HALFWAY_DISABLE_ISA, checked
// end to end in tests/tools) and one for tests; every vector path follows it to its scalar twin,
// with the same bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <random>
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/cpu.hpp"
#include "halfway/names.hpp"
#include "test_support.hpp"

using namespace halfway;

TEST_CASE("HALFWAY_DISABLE_ISA's names: features and groups, unknown names refused", "[cpu]") {
  CHECK(cpu::parse_disable_list("") == 0u);
  CHECK(cpu::parse_disable_list("f16c") == cpu::f16c);
  CHECK(cpu::parse_disable_list("f16c,,bmi2") == (cpu::f16c | cpu::bmi2));
  const uint32_t avx512 = cpu::parse_disable_list("avx512");
  CHECK((avx512 & cpu::kAvx512 & ~cpu::kAvx2) == (cpu::kAvx512 & ~cpu::kAvx2));
  CHECK((avx512 & (cpu::avx512bf16 | cpu::avx512fp16)) == (cpu::avx512bf16 | cpu::avx512fp16));
  CHECK((avx512 & cpu::kAvx2) == 0u);  // AVX2 stays
  CHECK((cpu::parse_disable_list("avx2") & cpu::kAvx512) == cpu::kAvx512);
  CHECK(cpu::parse_disable_list("amx") == (cpu::amx_tile | cpu::amx_bf16 | cpu::amx_fp16));
  CHECK_THROWS_AS(cpu::parse_disable_list("avx512,sse9"), InputError);
  CHECK_THROWS_WITH(cpu::parse_disable_list("sse9"), Catch::Contains("unknown feature 'sse9'"));
  CHECK(cpu::feature_names(cpu::avx512bf16 | cpu::f16c) == "f16c,avx512bf16");
}

TEST_CASE("model_name is the brand string Linux reports in /proc/cpuinfo", "[cpu]") {
  std::ifstream info("/proc/cpuinfo");
  std::string line, want;
  while (std::getline(info, line))
    if (line.rfind("model name", 0) == 0) {
      want = line.substr(line.find(':') + 1);
      want = want.substr(want.find_first_not_of(" \t"));
      break;
    }
  if (want.empty()) return halfway_test::skip("no model name in /proc/cpuinfo");
  CHECK(cpu::model_name() == want);
}

TEST_CASE("the test mask lowers the target for every path, and says why", "[cpu]") {
  const cpu::Target best = cpu::target();
  const uint32_t old = cpu::set_disabled_for_test(cpu::avx512f);
  CHECK(cpu::target() <= cpu::Target::avx2);
  CHECK(!cpu::has(cpu::avx512f));
  if (cpu::detected() & cpu::avx512f)
    CHECK_THAT(cpu::missing(cpu::avx512f), Catch::Contains("disabled for this test"));
  else
    CHECK_THAT(cpu::missing(cpu::avx512f), Catch::Contains("this CPU has no avx512f"));
  cpu::set_disabled_for_test(cpu::kAvx2);
  CHECK(cpu::target() == cpu::Target::scalar);
  CHECK(detail::bulk_path() == detail::BulkPath::reference);
  cpu::set_disabled_for_test(old);
  CHECK(cpu::target() == best);
  CHECK(cpu::missing(0) == "");
}

TEST_CASE("bulk rounding: every target the machine has gives the scalar twin's bits", "[cpu]") {
  std::mt19937 g(7);
  std::vector<float> x(1 << 16);
  for (auto& v : x) {
    uint32_t u = g();
    std::memcpy(&v, &u, 4);
  }
  const auto run = [&](uint32_t mask) {
    const uint32_t old = cpu::set_disabled_for_test(mask);
    std::vector<uint16_t> out(x.size());
    round_f32(formats::bf16, x.data(), out.data(), x.size());
    std::vector<uint16_t> h(x.size());
    round_f32(formats::fp16, x.data(), h.data(), x.size());
    cpu::set_disabled_for_test(old);
    out.insert(out.end(), h.begin(), h.end());
    return out;
  };
  const auto scalar = run(cpu::kAvx2);
  CHECK(run(0) == scalar);
  CHECK(run(cpu::avx512f) == scalar);
  CHECK(run(cpu::avx512bf16) == scalar);
}
