// Replays the committed GPU campaign report (results/gpu/report.json) on the CPU: see
// hw/include/halfway/hw/replay.hpp for what is recomputed. Without a committed report there is
// nothing to replay: "skipped: no GPU report committed yet", exit 77 (CTest: skipped).
//
//   test_hw_replay REPORT.json [--full]     --full: fingerprints over all 2^32 inputs (slow)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend.hpp"
#include "halfway/hw/replay.hpp"

namespace {

/// Fingerprint of a CPU backend's results over inputs 0, step, 2·step, ... < covered.
uint64_t slice_fingerprint(const halfway::hw::Backend& b, halfway::hw::Op op, uint64_t covered,
                           uint64_t step) {
  using namespace halfway::hw;
  std::vector<uint32_t> a, bb, out;
  std::vector<uint64_t> idx;
  for (uint64_t i = 0; i < covered; i += step) {
    uint32_t x, y;
    domain_operands(op, i, x, y);
    a.push_back(x);
    bb.push_back(y);
    idx.push_back(i);
  }
  out.resize(a.size());
  b.run(op, a.data(), bb.data(), nullptr, out.data(), a.size());
  uint64_t h = 0;
  const uint32_t mask = op_info(op).out.enc_mask();
  for (size_t i = 0; i < out.size(); ++i) h += hash_term(idx[i], out[i] & mask);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: test_hw_replay REPORT.json [--full]\n");
    return 2;
  }
  const bool full = argc > 2 && !std::strcmp(argv[2], "--full");
  std::ifstream in(argv[1]);
  if (!in) {
    std::printf("skipped: no GPU report committed yet (%s)\n", argv[1]);
    return 77;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json report;
  try {
    report = nlohmann::json::parse(text.str());
  } catch (const std::exception& e) {
    std::printf("FAILED: %s is not valid JSON: %s\n", argv[1], e.what());
    return 1;
  }
  halfway::hw::ReplayLog log;
  try {
    halfway::hw::replay_report(report, full, log);
  } catch (const std::exception& e) {
    log.fail("report", std::string("malformed: ") + e.what());
  }
  // Not a pass/fail criterion, a finding: does the device agree with a CPU implementation of
  // the same operation (NVIDIA's host code, x86 instructions) on the replay slice?
  try {
    for (const auto& [pname, part] : report.at("parts").items())
      if (part.is_object() && part.contains("checks"))
        for (const auto& c : part.at("checks")) {
          if (c.value("source", std::string()) != "exhaustive" || c.contains("skipped")) continue;
          halfway::hw::Op op;
          if (!halfway::hw::replay_detail::find_op(c.at("op").get<std::string>(), op)) continue;
          // Small domains in full (hw_hash), 2^32 ones on the replay slice (replay_hw_hash).
          const uint64_t covered = c.at("covered").get<uint64_t>();
          const bool all = covered <= (uint64_t(1) << 24);
          const uint64_t want = halfway::hw::replay_detail::hex(c.at(all ? "hw_hash" : "replay_hw_hash"));
          for (const halfway::hw::Backend* b : halfway::hw::all_backends()) {
            if (!b->absent_reason().empty()) continue;
            const auto ops = b->ops();
            if (std::find(ops.begin(), ops.end(), op) == ops.end()) continue;
            const uint64_t got = slice_fingerprint(*b, op, covered, all ? 1 : halfway::hw::kReplayStride);
            log.notes.push_back(c.at("op").get<std::string>() + ": the device " +
                                (got == want ? "equals " : "differs from ") + b->name() +
                                (all ? " on every input covered" : " on the replay slice"));
          }
        }
  } catch (const std::exception& e) {
    log.fail("report", std::string("malformed: ") + e.what());
  }
  for (const auto& n : log.notes) std::printf("note: %s\n", n.c_str());
  for (const auto& f : log.failures) std::printf("FAILED: %s\n", f.c_str());
  std::printf("%d entries replayed, %zu failures\n", log.replayed, log.failures.size());
  if (log.replayed == 0 && log.failures.empty()) {
    std::printf("skipped: the report holds nothing to replay\n");
    return 77;
  }
  return log.failures.empty() ? 0 : 1;
}
