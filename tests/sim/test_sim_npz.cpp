// The .npz reader and writer (sim/src/npz.cpp): round trips, Fortran order, every size checked
// before it is used, the memory limit, non-regular files, and archives past 65,535 members
// (ZIP64). Python's numpy reading our files and our reader reading numpy's are in
// tests/sim/test_npz.py and test_npz_output.py.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "halfway/names.hpp"
#include "halfway/sim/npz.hpp"
#include "scratch.hpp"

using namespace halfway;
using namespace halfway::sim;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) { return halfway_test::scratch_dir("npz", name); }

using halfway_test::slurp;

/// A .npy image with a hand-written header and raw data.
std::string npy(const std::string& descr, bool fortran, const std::string& shape,
                const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                  ", 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h.push_back(' ');
  h.push_back('\n');
  std::string b = "\x93NUMPY";
  b.push_back(1);
  b.push_back(0);
  b.push_back(char(h.size() & 0xFF));
  b.push_back(char(h.size() >> 8));
  return b + h + data;
}

std::string f8_bytes(const std::vector<double>& v) {
  std::string s(v.size() * 8, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

NpyArray arr(Shape shape, std::string dtype, std::vector<double> values) {
  NpyArray a;
  a.shape = std::move(shape);
  a.dtype = std::move(dtype);
  a.values = std::move(values);
  return a;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("npz: write and read back f4 f8 i8 scalars and empty and 3-D arrays", "[npz]") {
  const fs::path dir = scratch("roundtrip");
  const std::string path = (dir / "a.npz").string();
  std::vector<double> v24(24);
  for (size_t i = 0; i < v24.size(); ++i) v24[i] = double(i) * 0.25 - 3;
  write_npz(path, {{"w", arr({2, 3, 4}, "f8", v24)},
                   {"f", arr({3}, "f4", {0.5, -1.25, 1e30})},
                   {"i", arr({2, 2}, "i8", {-7, 0, 1LL << 40, 3})},
                   {"s", arr({}, "f8", {42})},
                   {"e", arr({0, 5}, "f4", {})}});
  for (const auto& f : fs::directory_iterator(dir))
    CHECK(f.path().filename() == "a.npz");  // no temporary or spool file left
  const NpzFile r = read_npz(path);
  REQUIRE(r.size() == 5);
  CHECK(r.at("w").shape == Shape{2, 3, 4});
  CHECK(r.at("w").dtype == "f8");
  CHECK(r.at("w").values == v24);
  CHECK(r.at("f").dtype == "f4");
  CHECK(r.at("f").values == std::vector<double>{0.5, -1.25, double(1e30f)});
  CHECK(r.at("i").values == std::vector<double>{-7, 0, double(1LL << 40), 3});
  CHECK(r.at("s").shape.empty());
  CHECK(r.at("s").values == std::vector<double>{42});
  CHECK(r.at("e").shape == Shape{0, 5});
  CHECK(r.at("e").values.empty());
  // The same arrays give the same bytes (no time stamps).
  const std::string first = slurp(path);
  write_npz(path, {{"w", arr({2, 3, 4}, "f8", v24)},
                   {"f", arr({3}, "f4", {0.5, -1.25, 1e30})},
                   {"i", arr({2, 2}, "i8", {-7, 0, 1LL << 40, 3})},
                   {"s", arr({}, "f8", {42})},
                   {"e", arr({0, 5}, "f4", {})}});
  CHECK(slurp(path) == first);
  fs::remove_all(dir);
}

TEST_CASE("npz: a Fortran-order array comes back in C order", "[npz]") {
  // Element (i, j, k) of a 2x3x4 array is 100i + 10j + k; Fortran order stores i fastest.
  std::vector<double> f;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) f.push_back(100 * i + 10 * j + k);
  const NpyArray a = parse_npy(npy("<f8", true, "(2, 3, 4)", f8_bytes(f)), "t");
  REQUIRE(a.shape == Shape{2, 3, 4});
  size_t n = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(a.values[n++] == 100 * i + 10 * j + k);
  // Dimensions of 1 and 0.
  CHECK(parse_npy(npy("<f8", true, "(1, 3, 1)", f8_bytes({1, 2, 3})), "t").values ==
        std::vector<double>{1, 2, 3});
  CHECK(parse_npy(npy("<f8", true, "(4, 0, 3)", ""), "t").values.empty());
}

TEST_CASE("npz: every size in a .npy header is checked before it is used", "[npz]") {
  auto err = [](const std::string& bytes) {
    return error_of([&] { (void)parse_npy(bytes, "t"); });
  };
  // 3 * 6148914691236517206 = 2^64 + 2: the old reader saw 2 elements and indexed far past them.
  CHECK_THAT(err(npy("<f8", true, "(6148914691236517206, 3)", std::string(16, '\0'))),
             Catch::Contains("too many elements"));
  CHECK_THAT(err(npy("<f4", false, "(4294967296, 4294967296)", "")),
             Catch::Contains("too many elements"));
  CHECK_THAT(err(npy("<f8", false, "(1152921504606846976, 16)", "")),  // 2^64 bytes
             Catch::Contains("too many elements"));
  CHECK_THAT(err(npy("<f4", false, "(18446744073709551617,)", "")),
             Catch::Contains("dimension too large"));
  CHECK_THAT(err(npy("<f4", false, "(-3, 2)", std::string(24, '\0'))),
             Catch::Contains("malformed shape"));
  CHECK_THAT(err(npy("<f4", false, "(3)", std::string(12, '\0'))),
             Catch::Contains("malformed shape"));
  CHECK_THAT(err(npy("<f4", false, "3", std::string(12, '\0'))), Catch::Contains("malformed shape"));
  CHECK_THAT(err(npy("<f4", false, "(2,)", std::string(4, '\0'))),
             Catch::Contains("truncated data"));
  CHECK_THAT(err(npy("<f4", false, "(2,)", std::string(12, '\0'))), Catch::Contains("implies"));
  CHECK_THAT(err(npy("<f4", false, "(536870912,)", std::string(8, '\0'))),
             Catch::Contains("truncated data"));
  CHECK_THAT(err(npy(">f4", false, "(1,)", std::string(4, '\0'))),
             Catch::Contains("big-endian"));
  CHECK_THAT(err(npy("<c8", false, "(1,)", std::string(8, '\0'))),
             Catch::Contains("unsupported dtype"));
  std::string h = npy("<f4", false, "(1,)", std::string(4, '\0'));
  h.replace(h.find("False"), 5, "Maybe");
  CHECK_THAT(err(h), Catch::Contains("fortran_order"));
  std::string v9 = npy("<f4", false, "(1,)", std::string(4, '\0'));
  v9[6] = 9;
  CHECK_THAT(err(v9), Catch::Contains("version 9"));
  CHECK_THAT(err(std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14)),
             Catch::Contains("npy header of"));
  CHECK_THAT(err("\x93NUMPY"), Catch::Contains("not a .npy array"));
  // Within the limit it reads; over it, it refuses before allocating.
  const std::string big = npy("<f8", false, "(1000,)", std::string(8000, '\0'));
  CHECK(parse_npy(big, "t", 8000).values.size() == 1000);
  CHECK_THAT(error_of([&] { (void)parse_npy(big, "t", 7999); }), Catch::Contains("over the limit"));
}

TEST_CASE("npz: read_npz refuses what is not a regular file and honours its limit", "[npz]") {
  CHECK_THAT(error_of([] { (void)read_npz("/dev/zero"); }), Catch::Contains("not a regular file"));
  const fs::path dir = scratch("special");
  CHECK_THAT(error_of([&] { (void)read_npz(dir.string()); }),
             Catch::Contains("not a regular file"));
  const std::string fifo = (dir / "fifo.npz").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { (void)read_npz(fifo); }), Catch::Contains("not a regular file"));
  CHECK_THAT(error_of([&] { (void)read_npz((dir / "missing.npz").string()); }),
             Catch::Contains("cannot read"));
  const std::string path = (dir / "a.npz").string();
  write_npz(path, {{"x", arr({500}, "f4", std::vector<double>(500, 1))},
                   {"y", arr({500}, "f4", std::vector<double>(500, 2))}});
  CHECK(read_npz(path, 8000).size() == 2);
  CHECK_THAT(error_of([&] { (void)read_npz(path, 7999); }), Catch::Contains("over the limit"));
  std::ofstream(path, std::ios::binary) << "PK\x03\x04 not really a zip";
  CHECK_THAT(error_of([&] { (void)read_npz(path); }), Catch::Contains("not an .npz (zip) file"));
  fs::remove_all(dir);
}

TEST_CASE("npz: 70000 members are written with ZIP64 and all read back", "[npz]") {
  // The old writer stored the member count in 16 bits (70,000 became 4,464).
  const fs::path dir = scratch("zip64");
  const std::string path = (dir / "many.npz").string();
  {
    NpzWriter w(path);
    for (int i = 0; i < 70000; ++i) {
      const float v[2] = {float(i), -float(i)};
      w.add_f4("m" + std::to_string(i), {2}, v, 2);
    }
    w.commit();
  }
  const std::string b = slurp(path);
  // The ZIP64 end-of-central-directory record and its locator precede the classic one, whose
  // 16-bit counts say 0xFFFF ("see ZIP64").
  REQUIRE(b.size() > 22 + 20 + 56);
  const size_t eocd = b.size() - 22;
  CHECK(b.compare(eocd, 4, "PK\x05\x06") == 0);
  CHECK(b.compare(eocd + 8, 4, "\xff\xff\xff\xff") == 0);
  CHECK(b.compare(eocd - 20, 4, "PK\x06\x07") == 0);
  const NpzFile r = read_npz(path);
  REQUIRE(r.size() == 70000);
  for (int i : {0, 1, 65535, 65536, 69999}) {
    const NpyArray& a = r.at("m" + std::to_string(i));
    CHECK(a.shape == Shape{2});
    CHECK(a.values == std::vector<double>{double(i), -double(i)});
  }
  fs::remove_all(dir);
}

TEST_CASE("npz: an uncommitted writer leaves nothing behind", "[npz]") {
  const fs::path dir = scratch("abandon");
  {
    NpzWriter w((dir / "g.npz").string());
    const float v[1] = {1};
    w.add_f4("a", {1}, v, 1);
  }
  CHECK(fs::is_empty(dir));
  fs::remove_all(dir);
}
