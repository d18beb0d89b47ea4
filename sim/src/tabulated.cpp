#include "tabulated.hpp"

#include <cstring>

#include "halfway/bulk.hpp"

namespace halfway::sim::detail {

const std::vector<uint32_t>& decoded_bits(const Format& fmt) {
  static std::mutex mutex;
  static std::vector<std::pair<Format, std::unique_ptr<const std::vector<uint32_t>>>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [f, t] : cache)
    if (f == fmt) return *t;
  const size_t count = size_t(1) << fmt.nbits();
  std::vector<uint16_t> codes(count);
  for (size_t k = 0; k < count; ++k) codes[k] = static_cast<uint16_t>(k);
  std::vector<float> values(count);
  decode_f32(fmt, codes.data(), values.data(), count);
  auto bits = std::make_unique<std::vector<uint32_t>>(count);
  std::memcpy(bits->data(), values.data(), count * sizeof(float));
  cache.emplace_back(fmt, std::move(bits));
  return *cache.back().second;
}

void encodings(const Format& fmt, const std::vector<uint32_t>& dec, const float* x, int32_t* key,
               size_t n) {
  uint16_t code[kLookupPass];
  for (size_t lo = 0; lo < n; lo += kLookupPass) {
    const size_t m = n - lo < kLookupPass ? n - lo : kLookupPass;
    round_f32(fmt, x + lo, code, m);  // near_even: a value of the format is its own encoding
    for (size_t i = 0; i < m; ++i) {
      uint32_t b;
      std::memcpy(&b, x + lo + i, sizeof b);
      key[lo + i] = dec[code[i]] == b ? int32_t(code[i]) : -1;
    }
  }
}

}  // namespace halfway::sim::detail
