#include "host/native/native_transport.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "host/support/random.h"
#include "protocol/sha256.h"

namespace tether::native {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kCheckFirstBytes = 64 * 1024;  // larger files: ask whether they are there first
constexpr std::size_t kMaxLeftovers = 16;             // failed uploads' names kept for removal

}  // namespace

NativeTransport::NativeTransport(asio::any_io_executor ex, Identity id, Progress progress)
    : ex_(std::move(ex)),
      name_(std::move(id.name)),
      sandbox_id_(std::move(id.sandbox_id)),
      where_(std::move(id.where)),
      progress_(std::move(progress)) {}

std::vector<std::string> NativeTransport::ShellArgv(std::string script) {
  std::vector<std::string> argv;
  argv.push_back("/bin/sh");
  argv.push_back("-c");
  argv.push_back(std::move(script));
  return argv;
}

asio::awaitable<absl::StatusOr<SandboxInfo>> NativeTransport::Probe() {
  if (info_) co_return *info_;
  absl::StatusOr<SandboxInfo> info = co_await ShellProbe(runner_, where_, "");
  if (!info.ok()) co_return info.status();
  info_ = *info;
  co_return *info;
}

asio::awaitable<absl::Status> NativeTransport::PutFile(std::string path, std::string_view bytes, int mode) {
  co_return co_await Put(std::move(path), bytes, mode, false);
}

asio::awaitable<absl::Status> NativeTransport::PutNewFile(std::string path, std::string_view bytes, int mode) {
  co_return co_await Put(std::move(path), bytes, mode, true);
}

asio::awaitable<absl::StatusOr<ScriptResult>> NativeTransport::RunScript(std::string script,
                                                                         std::string_view input) {
  co_return co_await exec_runner_(std::move(script), input);
}

asio::awaitable<absl::Status> NativeTransport::PutByShell(std::string path, std::string_view bytes, int mode,
                                                          bool known_missing) {
  ShellUploadOptions u;
  u.tunnel = TunnelMode::kBinary;
  u.progress = progress_;
  u.installed = &installed_;
  u.known_missing = known_missing;
  co_return co_await ShellPutFile(runner_, std::move(path), bytes, mode, std::move(u));
}

asio::awaitable<absl::Status> NativeTransport::PutByUpload(std::string path, std::string_view bytes, int mode,
                                                           bool known_missing, std::size_t max_bytes,
                                                           const Uploader& upload) {
  if (max_bytes != 0 && bytes.size() > max_bytes) {
    co_return absl::ResourceExhaustedError(absl::StrCat(name_, ": ", path, " has ", bytes.size(),
                                                        " bytes, above the upload limit of ", max_bytes));
  }
  const std::string who = absl::StrCat(name_, ": ");
  const std::string hash = protocol::Sha256Hex(bytes);
  const std::string key = absl::StrCat(path, "\n", hash);
  if (installed_.count(key)) co_return absl::OkStatus();
  if (!known_missing && bytes.size() > kCheckFirstBytes) {
    absl::StatusOr<bool> have = co_await ShellHasFile(runner_, who, path, hash);
    if (!have.ok()) co_return have.status();
    if (*have) {
      installed_.insert(key);
      co_return absl::OkStatus();
    }
  }
  const std::string tmp =
      absl::StrCat(path, ".up.", hash.substr(0, 16), ".", absl::BytesToHexString(internal::RandomBytes(4)));
  if (progress_) progress_(0, bytes.size());
  if (absl::Status st = co_await upload(tmp, bytes); !st.ok()) {
    // A cut upload may have left part of the file at `tmp`. No call on
    // this failing path: the next placing script removes it (the name is
    // this transport's own, so no other start's upload can be using it).
    if (leftovers_.size() < kMaxLeftovers) leftovers_.push_back(tmp);
    co_return st;
  }
  if (progress_) progress_(bytes.size(), bytes.size());
  const std::uint64_t reruns = unknown_reruns_;
  std::vector<std::string> leftovers = std::move(leftovers_);
  leftovers_.clear();
  absl::Status placed = co_await ShellPlaceFile(runner_, who, tmp, path, hash, mode, bytes.size(), leftovers);
  if (absl::IsUnavailable(placed) || absl::IsDeadlineExceeded(placed)) {
    // (The script may not have run: keep the names for the next one.)
    for (std::string& l : leftovers) {
      if (leftovers_.size() < kMaxLeftovers) leftovers_.push_back(std::move(l));
    }
  }
  if (!placed.ok()) {
    // A placing script whose first run lost its answer and that was run
    // again finds its temporary file gone (the first run moved it): ask
    // whether the file is in place before calling the upload failed.
    if (unknown_reruns_ == reruns) co_return placed;
    absl::StatusOr<bool> have = co_await ShellHasFile(runner_, who, path, hash);
    if (!have.ok() || !*have) co_return placed;
  }
  installed_.insert(key);
  co_return absl::OkStatus();
}

}  // namespace tether::native
