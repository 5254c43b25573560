// The binary and text tunnels: a supervisor command (launch or bridge) runs
// through Transport::Exec and its stdio carries the frames, as they are
// (binary) or as armored lines (text, protocol/armor.h). The Launch frame is
// the first thing written; the bridge relays to the daemon's socket.
//
// Both start by script (start_script.h): one Exec of `sh -c` finds the
// private directory and the supervisor and execs it, or answers one
// "tether-start-need" line instead of frames, which NeedLineChannel picks
// out of the stream before any frame decoder sees it.
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "host/tunnel/armored_channel.h"
#include "host/tunnel/start_script.h"
#include "host/tunnel/tunnels.h"
#include "host/support/trace.h"
#include "absl/strings/str_cat.h"
#include "protocol/armor.h"
#include "protocol/command_line.h"

namespace tether::tunnel {

namespace asio = boost::asio;

namespace {

// Picks a need line out of the channel's first output and then ends reads
// with an error, keeping the line in *need.
//  - Binary: frames begin 'T' 0xE7, so the first byte usually decides;
//    bytes are held (at most kMaxStartNeedLine) only while they could
//    still be the prefix.
//  - Text: the channel may prefix lines, add noise or replay; every line is
//    passed on to the armor decoder and scanned for the prefix until the
//    first armored line from the supervisor ("~T1<") shows it runs.
class NeedLineChannel final : public Channel {
 public:
  NeedLineChannel(std::unique_ptr<Channel> inner, std::shared_ptr<std::string> need, bool text,
                  asio::any_io_executor ex, const Target* target = nullptr)
      : inner_(std::move(inner)), need_(std::move(need)), text_(text), decided_(ex),
        gate_(ex, asio::steady_timer::time_point::max()) {
    if (target != nullptr && !text && !target->upload_token.empty()) {
      token_ = target->upload_token;
      uploadable_ = target->uploadable;
    }
  }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    absl::StatusOr<std::size_t> n = co_await Read(buf);
    if (!n.ok() || *n == 0 || !deciding_ || !need_->empty()) Decided();
    co_return n;
  }
  // A script that answered a need line has exited, and a channel may fail
  // the Launch frame's write before the line is read (envd: "stdin
  // closed"): a write that fails before the output decided waits (at most
  // kDecideWait) for the reader, so the line is not lost behind the error.
  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    // Until the output decides, what is written is kept: an inline upload
    // writes it again after the binary, for the launch the script execs.
    // A write that comes while the binary goes waits for it (and then
    // follows what is written again, as it followed it before).
    while (uploading_) co_await WaitGate();
    if (!token_.empty() && deciding_) {
      if (written_.size() + bytes.size() > kMaxRewrite) {
        token_.clear();  // too much to write again: the plain upload then
        written_.clear();
      } else {
        written_.append(bytes);
      }
    }
    ++writing_;
    absl::Status st = co_await inner_->Write(bytes);
    if (--writing_ == 0) gate_.cancel();
    if (!st.ok() && !decided_once_) {
      decided_.expires_after(kDecideWait);
      co_await decided_.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    co_return st;
  }

 private:
  static constexpr auto kDecideWait = std::chrono::seconds(2);
  // The Launch and Hello frames a start writes first (a Launch is at most
  // kMaxPayloadBytes); more than this and the script gets no binary inline.
  static constexpr std::size_t kMaxRewrite = 2 * protocol::kMaxPayloadBytes;

  // Waits until gate_ is cancelled (a write ended, or the upload did). Its
  // expiry stays at max (set once: a new expiry would cancel the others).
  asio::awaitable<void> WaitGate() {
    co_await gate_.async_wait(asio::as_tuple(asio::use_awaitable));
  }

  // Answers an "upload-inline" line (start_script.h): the token line, the
  // binary, and what was written before. False: not one to answer (the
  // line then ends the reads as any need line does).
  asio::awaitable<bool> UploadInline(const std::string& line) {
    if (token_.empty()) co_return false;
    absl::StatusOr<StartNeed> need = ParseStartNeed(line);
    if (!need.ok() || !need->inline_upload) co_return false;
    const UploadableSupervisor* u = nullptr;
    for (const UploadableSupervisor& c : uploadable_) {
      if (c.arch == need->arch && c.bytes != nullptr && c.bytes->size() == c.size) u = &c;
    }
    if (u == nullptr) co_return false;
    const std::string token_line = absl::StrCat("\n", std::exchange(token_, std::string()), "\n");  // once
    uploading_ = true;
    while (writing_ > 0) co_await WaitGate();  // a frame half written goes first, whole
    const std::string again = std::exchange(written_, std::string());
    bool ok = (co_await inner_->Write(token_line)).ok() && (co_await inner_->Write(*u->bytes)).ok() &&
              (co_await inner_->Write(again)).ok();
    uploading_ = false;
    gate_.cancel();
    co_return ok;
  }

  void Decided() {
    decided_once_ = true;
    decided_.cancel();
  }

  asio::awaitable<absl::StatusOr<std::size_t>> Read(std::span<char> buf) {
    if (text_) co_return co_await ReadText(buf);
    while (deciding_) {
      char tmp[1024];
      absl::StatusOr<std::size_t> n = co_await inner_->ReadSome({tmp, sizeof tmp});
      if (!n.ok()) co_return n;
      if (*n == 0) {
        deciding_ = false;  // EOF: whatever was held is the output
        eof_ = true;
        break;
      }
      held_.append(tmp, *n);
      const std::string_view prefix = protocol::kStartNeedPrefix;
      const std::size_t m = std::min(held_.size(), prefix.size());
      if (held_.compare(0, m, prefix.substr(0, m)) != 0) {
        deciding_ = false;
        break;
      }
      if (held_.size() < prefix.size()) continue;
      const std::size_t nl = held_.find('\n');
      if (nl != std::string::npos || held_.size() > protocol::kMaxStartNeedLine) {
        std::string line = held_.substr(0, std::min(nl, protocol::kMaxStartNeedLine + 1));
        if (nl != std::string::npos && co_await UploadInline(line)) {
          held_.erase(0, nl + 1);  // the launch speaks next (or the script again)
          continue;
        }
        *need_ = std::move(line);
        co_return absl::FailedPreconditionError("the start script answered a need line");
      }
    }
    if (!held_.empty()) {
      const std::size_t k = std::min(buf.size(), held_.size());
      std::memcpy(buf.data(), held_.data(), k);
      held_.erase(0, k);
      co_return k;
    }
    // (Never a second read after the inner channel's EOF: a channel need
    // not answer one.)
    if (eof_) co_return std::size_t{0};
    co_return co_await inner_->ReadSome(buf);
  }

 public:
  void CloseWrite() override { inner_->CloseWrite(); }
  void Close() override {
    Decided();
    inner_->Close();
  }
  asio::awaitable<void> AsyncClose() override {
    Decided();
    co_await inner_->AsyncClose();
  }
  std::optional<int> exit_code() const override { return inner_->exit_code(); }
  std::string Diagnostics() const override { return inner_->Diagnostics(); }

 private:
  asio::awaitable<absl::StatusOr<std::size_t>> ReadText(std::span<char> buf) {
    absl::StatusOr<std::size_t> n = co_await inner_->ReadSome(buf);
    if (!n.ok() || *n == 0 || !deciding_) co_return n;
    for (std::size_t i = 0; i < *n && deciding_; ++i) {
      const char c = buf[i];
      if (c != '\n') {
        if (line_.size() <= protocol::kMaxStartNeedLine) line_.push_back(c);
        continue;
      }
      if (line_.find(protocol::kArmorMarkerToHost) != std::string::npos) {
        deciding_ = false;  // the supervisor speaks: no need line can follow
      } else if (const std::size_t at = line_.find(protocol::kStartNeedPrefix);
                 at != std::string::npos && line_.size() <= protocol::kMaxStartNeedLine) {
        *need_ = line_.substr(at);
        if (!need_->empty() && need_->back() == '\r') need_->pop_back();
        co_return absl::FailedPreconditionError("the start script answered a need line");
      }
      line_.clear();
    }
    co_return n;
  }

  std::unique_ptr<Channel> inner_;
  bool eof_ = false;  // the inner channel ended while deciding
  std::shared_ptr<std::string> need_;
  const bool text_;
  asio::steady_timer decided_;
  bool decided_once_ = false;
  bool deciding_ = true;
  std::string token_;  // an inline upload may still be answered
  std::vector<UploadableSupervisor> uploadable_;
  std::string written_;  // while deciding, with a token
  asio::steady_timer gate_;
  int writing_ = 0;  // writes under way
  bool uploading_ = false;
  std::string held_;  // binary
  std::string line_;  // text
};

class StreamTunnel final : public Tunnel {
 public:
  using Tunnel::Tunnel;

  bool starts_by_script() const override { return true; }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Launch(const Target& target, std::string launch_frame,
                                                        wire::Hello hello, std::shared_ptr<Session>& session) override {
    co_return co_await Run(Shell(target.start_script), std::move(launch_frame), std::move(hello), session, &target);
  }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Reattach(const Target& target, wire::Hello hello,
                                                          std::shared_ptr<Session>& session) override {
    ReattachScriptOptions o;
    o.supervisor = target.supervisor;
    o.state_dir = target.state_dir;
    o.named = target.named;
    o.text = text();
    o.emulator = transport_.script_overrides().emulator;
    o.private_root = transport_.script_overrides().private_root;
    absl::StatusOr<wire::Welcome> welcome =
        co_await Run(Shell(ReattachScript(o)), std::string(), std::move(hello), session);
    if (std::optional<std::string> line = StartNeedLineOf(welcome.status())) {
      // The sandbox's own check of the reference's paths.
      absl::StatusOr<StartNeed> need = ParseStartNeed(*line);
      if (!need.ok()) co_return need.status();
      if (need->kind == StartNeed::Kind::kGone) {
        co_return absl::NotFoundError(absl::StrCat("no state directory ", target.state_dir, " in the sandbox"));
      }
      co_return absl::InvalidArgumentError(
          absl::StrCat("process reference: ", need->detail,
                       " (the reference was altered or is for another sandbox); nothing was run"));
    }
    co_return welcome;
  }

 private:
  bool text() const { return choice_.mode == TunnelMode::kText; }

  static std::vector<std::string> Shell(std::string script) {
    std::vector<std::string> argv;
    argv.push_back("/bin/sh");
    argv.push_back("-c");
    argv.push_back(std::move(script));
    argv.push_back("tether-start");  // $0, for the shell's own messages
    return argv;
  }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Run(std::vector<std::string> argv, std::string first,
                                                     wire::Hello hello, std::shared_ptr<Session>& session,
                                                     const Target* target = nullptr) {
    tether::internal::Trace("tunnel.exec");
    absl::StatusOr<std::unique_ptr<Channel>> channel = co_await transport_.Exec(std::move(argv));
    if (!channel.ok()) co_return channel.status();
    tether::internal::Trace("tunnel.exec_open");
    auto need = std::make_shared<std::string>();
    *channel = std::make_unique<NeedLineChannel>(*std::move(channel), need, text(), transport_.executor(), target);
    // Text: frames as armored lines, the Launch frame too.
    if (text()) *channel = internal::MakeArmoredChannel(*std::move(channel));
    session = Session::Create(transport_.executor(), *std::move(channel));
    if (!first.empty()) session->SendFrame(std::move(first));
    hello.set_zstd(choice_.zstd);
    absl::StatusOr<wire::Welcome> welcome = co_await session->Handshake(std::move(hello));
    tether::internal::Trace("tunnel.welcome", welcome.ok() ? "ok" : "failed");
    if (!welcome.ok() && !need->empty()) {
      session->Close();
      co_return StartNeedStatus(*need);
    }
    co_return welcome;
  }
};

}  // namespace

std::unique_ptr<Tunnel> MakeStreamTunnel(Transport& transport, TunnelChoice choice) {
  return std::make_unique<StreamTunnel>(transport, choice);
}

}  // namespace tether::tunnel
