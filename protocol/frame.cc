#include "protocol/frame.h"

#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "protocol/status_macros.h"

namespace tether::internal {
void CheckFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "tether: CHECK failed: %s at %s:%d\n", cond, file, line);
  std::abort();
}
}  // namespace tether::internal

namespace tether::protocol {
namespace {

// zstd level 1: output streams are usually text; higher levels cost far more
// CPU than they save on a pipe-speed channel.
constexpr int kZstdLevel = 1;

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxDeleter> ctx(ZSTD_createCCtx());
  TETHER_CHECK(ctx != nullptr);
  return ctx.get();
}

ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  TETHER_CHECK(ctx != nullptr);
  return ctx.get();
}

void PutHeader(std::uint8_t flags, std::size_t len, char* out) {
  out[0] = static_cast<char>(kFrameMagic0);
  out[1] = static_cast<char>(kFrameMagic1);
  out[2] = static_cast<char>(kFrameFormatVersion);
  out[3] = static_cast<char>(flags);
  out[4] = static_cast<char>((len >> 24) & 0xff);
  out[5] = static_cast<char>((len >> 16) & 0xff);
  out[6] = static_cast<char>((len >> 8) & 0xff);
  out[7] = static_cast<char>(len & 0xff);
}

struct Header {
  std::uint8_t flags;
  std::size_t len;
};

absl::StatusOr<Header> ParseHeaderBytes(const unsigned char* h) {
  if (h[0] != kFrameMagic0 || h[1] != kFrameMagic1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame: bad magic 0x", absl::Hex(h[0], absl::kZeroPad2), absl::Hex(h[1], absl::kZeroPad2),
        " (not a tether stream, or the channel altered the bytes)"));
  }
  if (h[2] != kFrameFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame: unsupported format version ", h[2], " (this build speaks ",
                     kFrameFormatVersion, ")"));
  }
  if ((h[3] & ~kKnownFlags) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame: unknown flags 0x", absl::Hex(h[3], absl::kZeroPad2)));
  }
  const std::size_t len = (std::size_t{h[4]} << 24) | (std::size_t{h[5]} << 16) |
                          (std::size_t{h[6]} << 8) | std::size_t{h[7]};
  if (len > kMaxFrameBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame: length ", len, " exceeds kMaxFrameBytes ", kMaxFrameBytes));
  }
  return Header{h[3], len};
}

// Decompresses one zstd frame whose declared size must fit kMaxPayloadBytes.
absl::Status Decompress(std::string_view in, std::string* out) {
  // Only a standard zstd frame: no skippable frames, no legacy formats.
  if (in.size() < 4 || static_cast<unsigned char>(in[0]) != 0x28 ||
      static_cast<unsigned char>(in[1]) != 0xB5 || static_cast<unsigned char>(in[2]) != 0x2F ||
      static_cast<unsigned char>(in[3]) != 0xFD) {
    return absl::DataLossError("frame: compressed payload is not a zstd frame (bad magic)");
  }
  const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) {
    return absl::DataLossError("frame: compressed payload is not a zstd frame");
  }
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return absl::DataLossError("frame: compressed payload does not declare its size");
  }
  if (declared > kMaxPayloadBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "frame: decompressed size ", declared, " exceeds kMaxPayloadBytes ", kMaxPayloadBytes));
  }
  const std::size_t compressed = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(compressed) || compressed != in.size()) {
    return absl::DataLossError("frame: compressed payload is truncated or has trailing bytes");
  }
  out->resize(static_cast<std::size_t>(declared));
  const std::size_t n = ZSTD_decompressDCtx(ThreadDCtx(), out->data(), out->size(), in.data(), in.size());
  if (ZSTD_isError(n)) {
    out->clear();
    return absl::DataLossError(absl::StrCat("frame: corrupt zstd payload: ", ZSTD_getErrorName(n)));
  }
  if (n != declared) {
    out->clear();
    return absl::DataLossError("frame: zstd payload size differs from its declared size");
  }
  return absl::OkStatus();
}

}  // namespace

void AppendFrame(std::string_view payload, Compression compression, std::string* out) {
  TETHER_CHECK(payload.size() <= kMaxPayloadBytes);
  const std::size_t start = out->size();
  if (compression == Compression::kAuto && payload.size() >= kMinCompressBytes) {
    const std::size_t bound = ZSTD_compressBound(payload.size());
    out->resize(start + kFrameHeaderBytes + bound);
    const std::size_t n = ZSTD_compressCCtx(ThreadCCtx(), out->data() + start + kFrameHeaderBytes,
                                            bound, payload.data(), payload.size(), kZstdLevel);
    // Keep the compressed form only when it actually saves bytes; random or
    // already-compressed output goes raw.
    if (!ZSTD_isError(n) && n < payload.size() && n <= kMaxFrameBytes) {
      PutHeader(kFlagZstd, n, out->data() + start);
      out->resize(start + kFrameHeaderBytes + n);
      return;
    }
    out->resize(start);
  }
  out->resize(start + kFrameHeaderBytes);
  PutHeader(0, payload.size(), out->data() + start);
  out->append(payload);
}

std::string EncodeFrame(std::string_view payload, Compression compression) {
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size());
  AppendFrame(payload, compression, &out);
  return out;
}

absl::StatusOr<DecodeResult> FrameSplitter::Next(std::string_view* in, std::string* frame) {
  if (!failed_.ok()) return failed_;
  while (!in->empty()) {
    const std::size_t take = std::min(in->size(), need_ - buf_.size());
    buf_.append(in->data(), take);
    in->remove_prefix(take);
    if (buf_.size() < need_) break;
    if (need_ == kFrameHeaderBytes) {
      absl::StatusOr<Header> h = ParseHeaderBytes(reinterpret_cast<const unsigned char*>(buf_.data()));
      if (!h.ok()) {
        failed_ = h.status();
        return failed_;
      }
      need_ = kFrameHeaderBytes + h->len;  // bounded by kMaxFrameBytes
      if (h->len > 0) continue;
    }
    frame->swap(buf_);
    buf_.clear();
    need_ = kFrameHeaderBytes;
    return DecodeResult::kFrame;
  }
  return DecodeResult::kNeedMore;
}

absl::Status FrameDecoder::ParseHeader() {
  ASSIGN_OR_RETURN(Header h, ParseHeaderBytes(header_));
  flags_ = h.flags;
  body_len_ = h.len;
  body_.clear();
  body_.reserve(body_len_);  // bounded by kMaxFrameBytes, checked above
  return absl::OkStatus();
}

absl::StatusOr<DecodeResult> FrameDecoder::Decode(std::string_view* in, std::string* payload) {
  if (!failed_.ok()) return failed_;
  while (true) {
    if (header_fill_ < kFrameHeaderBytes) {
      const std::size_t n = std::min(kFrameHeaderBytes - header_fill_, in->size());
      // An empty string_view may have a null data(): memcpy(_, nullptr, 0) is UB.
      if (n > 0) std::memcpy(header_ + header_fill_, in->data(), n);
      header_fill_ += n;
      in->remove_prefix(n);
      if (header_fill_ < kFrameHeaderBytes) return DecodeResult::kNeedMore;
      if (absl::Status st = ParseHeader(); !st.ok()) {
        failed_ = st;
        return st;
      }
    }
    const std::size_t want = body_len_ - body_.size();
    const std::size_t n = std::min(want, in->size());
    body_.append(in->data(), n);
    in->remove_prefix(n);
    if (body_.size() < body_len_) return DecodeResult::kNeedMore;

    header_fill_ = 0;
    if (flags_ & kFlagZstd) {
      if (absl::Status st = Decompress(body_, payload); !st.ok()) {
        failed_ = st;
        return st;
      }
    } else {
      payload->swap(body_);
    }
    body_.clear();
    return DecodeResult::kFrame;
  }
}

void PutFrameHeader(std::uint8_t flags, std::size_t len, char* out) { PutHeader(flags, len, out); }

absl::StatusOr<DecodeResult> FrameDecoder::DecodeView(std::string_view* in, std::string_view* payload,
                                                      std::string* storage) {
  if (failed_.ok() && header_fill_ == 0 && in->size() >= kFrameHeaderBytes) {
    absl::StatusOr<Header> h = ParseHeaderBytes(reinterpret_cast<const unsigned char*>(in->data()));
    if (!h.ok()) {
      failed_ = h.status();
      return failed_;
    }
    if (!(h->flags & kFlagZstd) && in->size() - kFrameHeaderBytes >= h->len) {
      *payload = in->substr(kFrameHeaderBytes, h->len);
      in->remove_prefix(kFrameHeaderBytes + h->len);
      return DecodeResult::kFrame;
    }
  }
  absl::StatusOr<DecodeResult> r = Decode(in, storage);
  if (r.ok() && *r == DecodeResult::kFrame) *payload = *storage;
  return r;
}

absl::StatusOr<std::string> DecodeWholeFrame(std::string_view frame) {
  if (frame.size() < kFrameHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame: truncated header (", frame.size(), " of ", kFrameHeaderBytes, " bytes)"));
  }
  ASSIGN_OR_RETURN(Header h,
                   ParseHeaderBytes(reinterpret_cast<const unsigned char*>(frame.data())));
  if (frame.size() - kFrameHeaderBytes != h.len) {
    return absl::InvalidArgumentError(absl::StrCat("frame: header says ", h.len,
                                                   " payload bytes, frame holds ",
                                                   frame.size() - kFrameHeaderBytes));
  }
  std::string payload;
  std::string_view body = frame.substr(kFrameHeaderBytes);
  if (h.flags & kFlagZstd) {
    RETURN_IF_ERROR(Decompress(body, &payload));
  } else {
    payload.assign(body);
  }
  return payload;
}

}  // namespace tether::protocol
