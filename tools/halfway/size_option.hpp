// A size option of the CLI (--max-memory, --max-disk): "2G", "512M", "1.5GiB" or bytes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "halfway/sim/memory.hpp"

namespace halfway::cli {

/// Adds `name` to `app`; bytes() is 0 when it was not given. Given, even empty, it is parsed
/// (sim::parse_memory_size): `--max-memory ''` is refused, never taken as the default.
///
///     SizeOption max_disk(app, "--max-disk", "refuse a run whose output is over SIZE");
///     app.parse(argc, argv);  o.max_disk = max_disk.bytes();
class SizeOption {
 public:
  SizeOption(CLI::App& app, const std::string& name, const std::string& help)
      : opt_(app.add_option(name, text_, help)) {}
  uint64_t bytes() const { return opt_->count() ? sim::parse_memory_size(text_) : 0; }

 private:
  std::string text_;
  CLI::Option* opt_;
};

}  // namespace halfway::cli
