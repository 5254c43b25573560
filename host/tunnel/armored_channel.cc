#include "host/tunnel/armored_channel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "protocol/armor.h"
#include "protocol/frame.h"

namespace tether::internal {
namespace {

namespace asio = boost::asio;

class ArmoredChannel final : public Channel {
 public:
  explicit ArmoredChannel(std::unique_ptr<Channel> inner) : inner_(std::move(inner)) {}

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    while (frames_.size() == frames_head_) {
      frames_.clear();
      frames_head_ = 0;
      if (!damaged_.ok()) {
        // A frame line arrived damaged (the armor's stream rule): the frame
        // is lost, so what follows has a hole. Fail like a cut channel (a
        // reattach resumes from the acknowledged offsets) rather than
        // deliver frames after the hole.
        co_return absl::UnavailableError(damaged_.message());
      }
      char text[64 * 1024];
      absl::StatusOr<std::size_t> n = co_await inner_->ReadSome({text, sizeof text});
      if (!n.ok() || *n == 0) co_return n;
      std::string_view in(text, *n);
      std::string frame;
      while (true) {
        absl::StatusOr<protocol::DecodeResult> r = decoder_.Next(&in, &frame);
        if (!r.ok()) damaged_ = r.status();
        if (!r.ok() || *r == protocol::DecodeResult::kNeedMore) break;
        frames_.append(frame);
      }
    }
    const std::size_t take = std::min(buf.size(), frames_.size() - frames_head_);
    std::memcpy(buf.data(), frames_.data() + frames_head_, take);
    frames_head_ += take;
    co_return take;
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    std::string lines;
    std::string frame;
    while (true) {
      absl::StatusOr<protocol::DecodeResult> r = splitter_.Next(&bytes, &frame);
      if (!r.ok()) co_return absl::InternalError(absl::StrCat("armoring our own frames: ", r.status().message()));
      if (*r == protocol::DecodeResult::kNeedMore) break;
      protocol::AppendArmoredLine(frame, protocol::ArmorDirection::kToSupervisor, &lines);
    }
    if (lines.empty()) co_return absl::OkStatus();
    co_return co_await inner_->Write(lines);
  }

  void CloseWrite() override { inner_->CloseWrite(); }
  void Close() override { inner_->Close(); }
  std::string Diagnostics() const override {
    std::string d = inner_->Diagnostics();
    if (decoder_.skipped_lines() > 0) absl::StrAppend(&d, " [", decoder_.skipped_lines(), " non-frame lines skipped]");
    return d;
  }

 private:
  std::unique_ptr<Channel> inner_;
  protocol::ArmorDecoder decoder_{protocol::ArmorDirection::kToHost};
  protocol::FrameSplitter splitter_;
  std::string frames_;  // decoded frame bytes not yet handed to the reader
  std::size_t frames_head_ = 0;
  absl::Status damaged_;  // set by the first damaged line
};

}  // namespace

std::unique_ptr<Channel> MakeArmoredChannel(std::unique_ptr<Channel> text_channel) {
  return std::make_unique<ArmoredChannel>(std::move(text_channel));
}

}  // namespace tether::internal
