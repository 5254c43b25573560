#include "supervisor/output_sender.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "protocol/envelope.h"

namespace tether::supervisor {
namespace {

using protocol::Compression;

std::uint64_t ClampWindow(std::uint64_t w) { return std::clamp<std::uint64_t>(w, 4096, 64u << 20); }

}  // namespace

void OutputBatch::Clear() {
  owned_.clear();
  pieces_.clear();
  size_ = 0;
  owned_size_in_pieces_ = 0;
}

void OutputBatch::Reference(std::string_view bytes) {
  TakeOwned();
  pieces_.push_back({bytes.data(), 0, bytes.size()});
  size_ += bytes.size();
}

std::size_t OutputBatch::size() {
  TakeOwned();
  return size_;
}

const std::vector<std::string_view>& OutputBatch::Views() {
  TakeOwned();
  views_.clear();
  for (const Piece& p : pieces_) views_.emplace_back(p.data ? p.data : owned_.data() + p.pos, p.len);
  return views_;
}

void OutputBatch::TakeOwned() {
  const std::size_t have = owned_size_in_pieces_;
  if (owned_.size() > have) {
    pieces_.push_back({nullptr, have, owned_.size() - have});
    size_ += owned_.size() - have;
    owned_size_in_pieces_ = owned_.size();
  }
}

void OutputSender::Start(bool zstd, std::uint64_t window_bytes) {
  zstd_ = zstd;
  if (window_bytes != 0) window_ = ClampWindow(window_bytes);
}

absl::Status OutputSender::Ack(const std::array<std::uint64_t, kNumStreams>& offsets, std::uint64_t window_bytes,
                               Supervised& p, std::array<bool, kNumStreams>* released) {
  for (int i = 0; i < kNumStreams; ++i) {
    if (offsets[i] > p.rings[i].end()) {
      return absl::InvalidArgumentError(absl::StrCat("ack: offset ", offsets[i], " beyond the ",
                                                     p.rings[i].end(), " bytes of stream ", i + 1));
    }
    // After a reattach the host may acknowledge bytes it holds from an
    // earlier attachment before we resent them: they need no resending.
    if (offsets[i] > sent_[i]) sent_[i] = offsets[i];
    if (offsets[i] > acked_[i]) {
      acked_[i] = offsets[i];
      p.rings[i].Release(offsets[i]);
      (*released)[i] = true;
    }
  }
  if (window_bytes != 0) window_ = ClampWindow(window_bytes);
  return absl::OkStatus();
}

void OutputSender::Append(const Supervised& p, std::uint64_t generation, OutputBatch* batch) {
  const std::size_t batch_before = batch->size();
  for (int k = 0; k < kNumStreams; ++k) {
    const int i = (first_stream_ + k) % kNumStreams;
    const OutputRing& r = p.rings[i];
    const wire::Stream stream = StreamOf(i, p.pty());
    while (batch->size() < kMaxBatchBytes) {
      // The window is shared by both streams: a quiet stderr leaves all of
      // it to stdout.
      const std::uint64_t in_flight = sent_[0] - acked_[0] + sent_[1] - acked_[1];
      if (in_flight >= window_) break;
      std::string_view v = r.Readable(sent_[i], std::min<std::uint64_t>(kMaxOutputChunkBytes, window_ - in_flight));
      if (v.empty()) break;
      if (zstd_ && zstd_skip_[i] == 0) {
        wire::Envelope env;
        env.set_generation(generation);
        wire::Output* o = env.mutable_output();
        o->set_stream(stream);
        o->set_offset(sent_[i]);
        o->set_data(v.data(), v.size());
        const std::size_t at = batch->owned()->size();
        protocol::AppendEnvelope(env, Compression::kAuto, batch->owned());
        // Output that does not compress (random, already compressed) is
        // sent raw for the next frames instead of being tried every time.
        const bool shrank = (static_cast<unsigned char>((*batch->owned())[at + 3]) & protocol::kFlagZstd) != 0;
        if (!shrank && v.size() >= protocol::kMinCompressBytes) zstd_skip_[i] = kZstdSkipFrames;
      } else {
        if (zstd_skip_[i] > 0) --zstd_skip_[i];
        // The frame's prefix, then the data straight from the ring.
        char prefix[protocol::kMaxOutputPrefixBytes];
        batch->Append({prefix, protocol::EncodeOutputPrefix(generation, stream, sent_[i], v.size(), prefix)});
        batch->Reference(v);
      }
      sent_[i] += v.size();
    }
    if (p.eof[i] && sent_[i] == r.end() && !eof_sent_[i]) {
      wire::Envelope env;
      env.set_generation(generation);
      wire::Output* o = env.mutable_output();
      o->set_stream(stream);
      o->set_offset(sent_[i]);
      o->set_eof(true);
      protocol::AppendEnvelope(env, Compression::kNone, batch->owned());
      eof_sent_[i] = true;
    }
  }
  if (batch->size() > batch_before) first_stream_ ^= 1;
  if (p.exit && eof_sent_[0] && eof_sent_[1] && !exit_sent_) {
    wire::Envelope ex;
    ex.set_generation(generation);
    *ex.mutable_exit() = *p.exit;
    protocol::AppendEnvelope(ex, Compression::kNone, batch->owned());
    exit_sent_ = true;
  }
}

}  // namespace tether::supervisor
