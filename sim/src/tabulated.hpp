// Elementwise functions of one low-precision value, looked up by encoding. A tensor of a dtype
// of at most 16 bits holds at most 2^16 distinct values, so f(x) (GELU's erf, its derivative's
// exp) can be computed once per encoding and looked up per element. Bit-identical by
// construction: the table holds exactly what the element loop would compute, the same
// expression on the same binary64 argument, and an element is looked up only where its float
// bits are those of the encoding's decoded value (any other element, a NaN whose payload the
// format cannot hold for instance, is computed as before).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfway/format.hpp"
#include "halfway/sim/dtype.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::sim::detail {

/// Whether values of `d` are looked up by encoding: low-precision dtypes of at most 16 bits.
inline bool tabulable(const DType& d) { return d.is_low() && d.fmt.nbits() <= 16; }

/// The float bits of each of `fmt`'s 2^nbits encodings (decode_f32), computed once per format.
const std::vector<uint32_t>& decoded_bits(const Format& fmt);

/// key[i] = x[i]'s encoding in `fmt` where x[i]'s float bits are that encoding's decoded value
/// (`dec`, decoded_bits(fmt)), else -1 (the element is computed, not looked up).
void encodings(const Format& fmt, const std::vector<uint32_t>& dec, const float* x, int32_t* key,
               size_t n);

/// table[k] = R(fn(decoded value of encoding k)), computed once per (function type, format).
/// `Fn` is stateless, so its type names the function.
template <class R, class Fn>
const std::vector<R>& tabulated(const Format& fmt, Fn fn) {
  static_assert(std::is_empty_v<Fn>, "a tabulated function has no state");
  static std::mutex mutex;
  static std::vector<std::pair<Format, std::unique_ptr<const std::vector<R>>>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [f, t] : cache)
    if (f == fmt) return *t;
  const std::vector<uint32_t>& dec = decoded_bits(fmt);
  auto table = std::make_unique<std::vector<R>>(dec.size());
  for (size_t k = 0; k < dec.size(); ++k)
    (*table)[k] = static_cast<R>(fn(static_cast<double>(bits_f32(dec[k]))));
  cache.emplace_back(fmt, std::move(table));
  return *cache.back().second;
}

/// Elements per lookup pass (the keys live on the stack).
inline constexpr size_t kLookupPass = 1024;

/// For i in [0, n): out(i, key) with key x[i]'s encoding or -1, a pass at a time.
template <class Out>
void for_each_encoding(const Format& fmt, const float* x, size_t n, Out out) {
  int32_t key[kLookupPass];
  const std::vector<uint32_t>& dec = decoded_bits(fmt);  // once, not per pass
  for (size_t lo = 0; lo < n; lo += kLookupPass) {
    const size_t m = n - lo < kLookupPass ? n - lo : kLookupPass;
    encodings(fmt, dec, x + lo, key, m);
    for (size_t i = 0; i < m; ++i) out(lo + i, key[i]);
  }
}

}  // namespace halfway::sim::detail
