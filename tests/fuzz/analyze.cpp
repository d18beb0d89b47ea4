// Fuzz harness: the option values of `halfway analyze` (--formats, with block schemes as
// parse_analysis_formats takes them and without as parse_format_list, --scales, --max-memory) and
// the block-scheme names of halfway.encode_blocks (parse_block_scheme). The input is up to
// four lines, one value each, in that order; each is parsed on its own.
#include <sstream>

#include "fuzz.hpp"
#include "halfway/blocks.hpp"
#include "halfway/sim/analyze.hpp"
#include "halfway/sim/memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  std::istringstream in(fuzz::bytes_of(data, size));
  std::string formats, scales, memory, scheme;
  std::getline(in, formats);
  std::getline(in, scales);
  std::getline(in, memory);
  std::getline(in, scheme);
  fuzz::guarded([&] { (void)sim::parse_format_list(formats); });
  fuzz::guarded([&] { (void)sim::parse_analysis_formats(formats); });
  fuzz::guarded([&] {
    sim::AnalyzeOptions o;
    std::tie(o.k_min, o.k_max) = sim::parse_scale_range(scales);
    sim::check_analyze_options(o);
  });
  fuzz::guarded([&] { (void)sim::parse_memory_size(memory); });
  fuzz::guarded([&] { (void)parse_block_scheme(scheme); });
  return 0;
}
