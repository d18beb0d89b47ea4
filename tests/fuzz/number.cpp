// Fuzz harness: number and name parsing of the command line: parse_value_round_to_odd and
// parse_u64 (tools/halfway/value_parse.cpp: `halfway round VALUE --seed N`), parse_format and
// parse_rounding (lib/include/halfway/names.hpp). The input is one argument's text. Besides
// not crashing: the value parser leaves the rounding mode as it found it, and a format's name
// parses back to the same format.
#include <cfenv>
#include <optional>

#include "fuzz.hpp"
#include "halfway/names.hpp"
#include "value_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  const std::string text = fuzz::bytes_of(data, size);
  fuzz::guarded([&] { (void)cli::parse_value_round_to_odd(text); });
  if (std::fegetround() != FE_TONEAREST)
    fuzz::fail("parse_value_round_to_odd", "the rounding mode is left changed");
  fuzz::guarded([&] { (void)cli::parse_u64(text, "number"); });
  std::optional<Format> f;
  fuzz::guarded([&] { f = parse_format(text); });
  if (f) {  // no exception allowed from here on
    const std::string name = format_name(*f);
    if (!(parse_format(name) == *f)) fuzz::fail("format_name does not parse back", name.c_str());
  }
  fuzz::guarded([&] { (void)rounding_name(parse_rounding(text)); });
  return 0;
}
