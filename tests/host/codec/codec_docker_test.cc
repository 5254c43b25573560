#include "host/codec/stdcopy.h"

#include <doctest.h>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "host/codec/tar.h"

namespace tether::codec {
namespace {

using Pieces = std::vector<std::pair<StdStream, std::string>>;

// Feeds `wire` in chunks of `chunk` bytes; adjacent pieces of one stream are
// joined, so any split gives the same result.
absl::StatusOr<Pieces> Demux(std::string_view wire, std::size_t chunk, std::size_t cap = kMaxStdcopyFrameBytes) {
  StdcopyDecoder dec(cap);
  Pieces out;
  for (std::size_t off = 0; off < wire.size(); off += chunk) {
    std::string_view in = wire.substr(off, chunk);
    while (true) {
      absl::StatusOr<std::optional<StdcopyPiece>> p = dec.Next(&in);
      if (!p.ok()) return p.status();
      if (!*p) break;
      REQUIRE(!(*p)->bytes.empty());
      if (!out.empty() && out.back().first == (*p)->stream) {
        out.back().second.append((*p)->bytes);
      } else {
        out.emplace_back((*p)->stream, std::string((*p)->bytes));
      }
    }
    CHECK(in.empty());
  }
  return out;
}

std::string Header(unsigned char stream, unsigned char p1, unsigned char p2, unsigned char p3, std::uint32_t len) {
  std::string h = {static_cast<char>(stream), static_cast<char>(p1), static_cast<char>(p2), static_cast<char>(p3)};
  h.push_back(static_cast<char>(len >> 24));
  h.push_back(static_cast<char>(len >> 16));
  h.push_back(static_cast<char>(len >> 8));
  h.push_back(static_cast<char>(len));
  return h;
}

TEST_CASE("stdcopy: stdout and stderr come apart at every split") {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  const std::string wire = EncodeStdcopyFrame(StdStream::kStdout, std::string("\0\377", 2)) +
                           EncodeStdcopyFrame(StdStream::kStderr, "oops\n") +
                           EncodeStdcopyFrame(StdStream::kStdout, "") +  // empty frames carry nothing
                           EncodeStdcopyFrame(StdStream::kStdout, all) +
                           EncodeStdcopyFrame(StdStream::kStdin, "in");
  for (std::size_t chunk = 1; chunk <= wire.size(); ++chunk) {
    CAPTURE(chunk);
    absl::StatusOr<Pieces> p = Demux(wire, chunk);
    REQUIRE(p.ok());
    REQUIRE(p->size() == 4);
    CHECK((*p)[0] == std::make_pair(StdStream::kStdout, std::string("\0\377", 2)));
    CHECK((*p)[1] == std::make_pair(StdStream::kStderr, std::string("oops\n")));
    CHECK((*p)[2] == std::make_pair(StdStream::kStdout, all));
    CHECK((*p)[3] == std::make_pair(StdStream::kStdin, std::string("in")));
  }
}

TEST_CASE("stdcopy: payload passes through as it arrives, never buffered") {
  StdcopyDecoder dec;
  const std::string wire = EncodeStdcopyFrame(StdStream::kStdout, "abcdef");
  std::string_view in = std::string_view(wire).substr(0, 10);  // header + "ab"
  absl::StatusOr<std::optional<StdcopyPiece>> p = dec.Next(&in);
  REQUIRE(p.ok());
  REQUIRE(p->has_value());
  CHECK((*p)->bytes == "ab");
  CHECK(dec.remaining() == 4);
  CHECK(!dec.idle());
  p = dec.Next(&in);
  REQUIRE(p.ok());
  CHECK(!p->has_value());
  std::string_view rest = std::string_view(wire).substr(10);
  p = dec.Next(&rest);
  REQUIRE(p.ok());
  CHECK((*p)->bytes == "cdef");
  CHECK(dec.idle());
}

TEST_CASE("stdcopy: a bad stream byte is refused and the error sticks") {
  const std::string wire = Header(4, 0, 0, 0, 1) + "x";
  absl::StatusOr<Pieces> p = Demux(wire, wire.size());
  REQUIRE(!p.ok());
  CHECK(absl::IsInvalidArgument(p.status()));
  CHECK(std::string(p.status().message()).find("stream byte 4") != std::string::npos);
  // A tty's raw output (text where the header should be) is refused the same way.
  CHECK(absl::IsInvalidArgument(Demux("hello world\n", 3).status()));

  StdcopyDecoder dec;
  std::string_view in = wire;
  CHECK(!dec.Next(&in).ok());
  const std::string good = EncodeStdcopyFrame(StdStream::kStdout, "y");
  std::string_view again = good;
  CHECK(!dec.Next(&again).ok());
}

TEST_CASE("stdcopy: nonzero padding is refused") {
  for (int i = 1; i <= 3; ++i) {
    CAPTURE(i);
    const std::string wire = Header(1, i == 1, i == 2, i == 3, 1) + "x";
    absl::StatusOr<Pieces> p = Demux(wire, 1);
    REQUIRE(!p.ok());
    CHECK(absl::IsInvalidArgument(p.status()));
    CHECK(std::string(p.status().message()).find("padding") != std::string::npos);
  }
}

TEST_CASE("stdcopy: a length above the cap is refused before any payload") {
  absl::StatusOr<Pieces> p = Demux(Header(1, 0, 0, 0, 0xffffffffu), 8);
  REQUIRE(!p.ok());
  CHECK(absl::IsResourceExhausted(p.status()));
  CHECK(absl::IsResourceExhausted(Demux(Header(2, 0, 0, 0, 101) + "x", 4, 100).status()));
  CHECK(Demux(Header(2, 0, 0, 0, 100) + std::string(100, 'x'), 7, 100).ok());
}

TEST_CASE("stdcopy: a stream cut inside a frame is not idle") {
  StdcopyDecoder dec;
  std::string wire = EncodeStdcopyFrame(StdStream::kStdout, "abc");
  std::string_view in = std::string_view(wire).substr(0, 5);
  CHECK(dec.Next(&in).ok());
  CHECK(!dec.idle());
  CHECK(StdcopyDecoder().idle());
}

// ---- tar ----

struct Parsed {
  std::string name, prefix;
  unsigned long mode = 0, uid = 0, gid = 0, size = 0, mtime = 0, checksum = 0;
  char type = 0;
  std::string magic;
};

unsigned long OctalField(const std::string& t, std::size_t off, std::size_t len) {
  return std::strtoul(t.substr(off, len).c_str(), nullptr, 8);
}

Parsed ParseHeader(const std::string& t) {
  Parsed p;
  p.name = t.substr(0, 100).c_str();
  p.mode = OctalField(t, 100, 8);
  p.uid = OctalField(t, 108, 8);
  p.gid = OctalField(t, 116, 8);
  p.size = OctalField(t, 124, 12);
  p.mtime = OctalField(t, 136, 12);
  p.checksum = OctalField(t, 148, 8);
  p.type = t[156];
  p.magic = t.substr(257, 8);
  p.prefix = t.substr(345, 155).c_str();
  return p;
}

unsigned long Checksum(std::string h) {
  std::fill(h.begin() + 148, h.begin() + 156, ' ');
  unsigned long sum = 0;
  for (std::size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(h[i]);
  return sum;
}

TEST_CASE("tar: one regular file, its header, padding and two zero blocks") {
  const std::string content("\0\1\2tool\377", 8);
  absl::StatusOr<std::string> tar = TarOneFile({.name = "tool.up.1", .mode = 0700, .uid = 1000, .gid = 100}, content);
  REQUIRE(tar.ok());
  REQUIRE(tar->size() == 512 * 4);
  const Parsed p = ParseHeader(*tar);
  CHECK(p.name == "tool.up.1");
  CHECK(p.mode == 0700);
  CHECK(p.uid == 1000);
  CHECK(p.gid == 100);
  CHECK(p.size == 8);
  CHECK(p.mtime == 0);
  CHECK(p.type == '0');
  CHECK(p.magic == std::string("ustar\0" "00", 8));
  CHECK(p.checksum == Checksum(tar->substr(0, 512)));
  CHECK(tar->substr(512, 8) == content);
  CHECK(tar->substr(520) == std::string(512 * 3 - 8, '\0'));
}

TEST_CASE("tar: empty and block-sized files") {
  absl::StatusOr<std::string> empty = TarOneFile({.name = "e"}, "");
  REQUIRE(empty.ok());
  CHECK(empty->size() == 512 * 3);
  absl::StatusOr<std::string> block = TarOneFile({.name = "b"}, std::string(512, 'x'));
  REQUIRE(block.ok());
  CHECK(block->size() == 512 * 4);
}

TEST_CASE("tar: long names split into prefix and name; names that do not fit are refused") {
  const std::string dir(120, 'd');
  absl::StatusOr<std::string> t = TarOneFile({.name = dir + "/file"}, "x");
  REQUIRE(t.ok());
  const Parsed p = ParseHeader(*t);
  CHECK(p.prefix == dir);
  CHECK(p.name == "file");
  CHECK(TarOneFile({.name = std::string(100, 'n')}, "x").ok());

  absl::StatusOr<std::string> too_long = TarOneFile({.name = std::string(101, 'n')}, "x");
  REQUIRE(!too_long.ok());
  CHECK(absl::IsInvalidArgument(too_long.status()));
  CHECK(std::string(too_long.status().message()).find("does not fit") != std::string::npos);
  CHECK(!TarOneFile({.name = std::string(156, 'd') + "/f"}, "x").ok());
  CHECK(!TarOneFile({.name = "d/" + std::string(101, 'f')}, "x").ok());
}

TEST_CASE("tar: names that escape, bad modes and ids are refused") {
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = ""}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "/etc/passwd"}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "../x"}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "a/../../x"}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "dir/"}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = std::string("a\0b", 3)}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "x", .mode = 010000}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "x", .mode = -1}, "x").status()));
  CHECK(absl::IsInvalidArgument(TarOneFile({.name = "x", .uid = 07777777 + 1}, "x").status()));
}

TEST_CASE("tar: the system's tar reads the archive back") {
  if (std::system("command -v tar >/dev/null 2>&1") != 0) return;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tether-tar-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "out");
  std::string content;
  for (int i = 0; i < 3000; ++i) content.push_back(static_cast<char>(i * 7));
  absl::StatusOr<std::string> tar = TarOneFile({.name = "sub/f.bin", .mode = 0640}, content);
  REQUIRE(tar.ok());
  std::ofstream(dir / "a.tar", std::ios::binary) << *tar;
  const std::string cmd = "tar -C '" + (dir / "out").string() + "' -xf '" + (dir / "a.tar").string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(dir / "out" / "sub" / "f.bin", std::ios::binary);
  const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(back == content);
  CHECK((std::filesystem::status(dir / "out" / "sub" / "f.bin").permissions() & std::filesystem::perms::all) ==
        static_cast<std::filesystem::perms>(0640));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tether::codec
