// Fuzz harness: the names a user writes in a config or on the command line and that no other
// harness takes on its own: accumulation names (accumulator_by_name), dtypes (parse_dtype),
// optimizer state dtypes (parse_state_format: fp32, pow2:e4m3, dynamic8:block=N, ...),
// policy presets (preset_policy), op kinds and cast rules of [precision.rules] (parse_op,
// parse_rule), bisect's --granularity (parse_granularity) and HALFWAY_DISABLE_ISA's list
// (parse_disable_list); block schemes are the analyze harness's. The input is one name. Besides
// not crashing: every name that parses prints back to a name that parses to the same thing.
#include <optional>
#include <string>

#include "fuzz.hpp"
#include "halfway/cpu.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/bisect.hpp"
#include "halfway/sim/dtype.hpp"
#include "halfway/sim/optim.hpp"
#include "halfway/sim/policy.hpp"

namespace {

// Parse `text`; when it parses, its printed name must parse back to the same value.
template <class Parse, class Name>
void round_trip(const char* what, const std::string& text, Parse parse, Name name) {
  using namespace halfway;
  std::optional<decltype(parse(text))> v;
  fuzz::guarded([&] { v = parse(text); });
  if (!v) return;
  const std::string printed = name(*v);
  std::optional<decltype(parse(text))> back;
  fuzz::guarded([&] { back = parse(printed); });
  if (!back || !(*back == *v)) fuzz::fail(what, printed.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  using namespace halfway::sim;
  const std::string text = fuzz::bytes_of(data, size);
  round_trip("accumulation name does not parse back", text,
             [](const std::string& s) { return accumulator_by_name(s).name; },
             [](const std::string& n) { return n; });
  round_trip("dtype name does not parse back", text,
             [](const std::string& s) { return parse_dtype(s); },
             [](const DType& d) { return d.name(); });
  round_trip("optimizer state dtype does not parse back", text,
             [](const std::string& s) { return parse_state_format(s, "state_dtype"); },
             [](const StateFormat& f) { return f.name(); });
  round_trip("op name does not parse back", text,
             [](const std::string& s) { return parse_op(s); },
             [](OpKind k) { return std::string(op_name(k)); });
  round_trip("cast rule name does not parse back", text,
             [](const std::string& s) { return parse_rule(s); },
             [](CastRule r) { return std::string(rule_name(r)); });
  round_trip("granularity name does not parse back", text,
             [](const std::string& s) { return parse_granularity(s); },
             [](Granularity g) { return std::string(granularity_name(g)); });
  fuzz::guarded([&] { (void)preset_policy(text); });
  fuzz::guarded([&] { (void)cpu::parse_disable_list(text); });
  return 0;
}
