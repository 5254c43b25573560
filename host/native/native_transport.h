// What every native provider's Transport shares, so that a provider writes
// only what is its own (its Exec, its capabilities, its file API):
//   - its name, sandbox id and executor;
//   - the probe (ShellProbe), asked once per transport;
//   - the setup-script runner the probe and the uploads go through
//     (`/bin/sh -c` over Exec unless the provider overrides RunScript);
//   - the upload cache (a path + sha256 installed in this sandbox is not
//     sent or checked again) and the two shapes of an upload: through the
//     shell alone (PutByShell), or through the provider's file API into a
//     temporary name that the shell then checks and renames (PutByUpload);
// The checks every factory makes of its options: native_options.h.
//
//   class BoxTransport final : public native::NativeTransport {
//    public:
//     BoxTransport(asio::any_io_executor ex, BoxOptions o)
//         : NativeTransport(std::move(ex), {"box", o.id, "box sandbox " + o.id}, o.upload_progress) {}
//     ... capabilities(), Exec() ...
//    protected:
//     asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool missing) override {
//       co_return co_await PutByShell(std::move(path), bytes, mode, missing);
//     }
//   };
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tether/shell_setup.h"
#include "tether/transport.h"

namespace tether::native {

// Called as an upload proceeds (bytes sent, total); may be empty.
using Progress = std::function<void(std::size_t, std::size_t)>;

class NativeTransport : public Transport {
 public:
  std::string_view name() const final { return name_; }
  std::string sandbox_id() const final { return sandbox_id_; }
  boost::asio::any_io_executor executor() const final { return ex_; }
  // ShellProbe through RunScript; later calls answer from the first success.
  boost::asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() final;
  boost::asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) final;
  boost::asio::awaitable<absl::Status> PutNewFile(std::string path, std::string_view bytes, int mode) final;

 protected:
  struct Identity {
    std::string name;        // "boat": Transport::name()
    std::string sandbox_id;  // Transport::sandbox_id(), saved in process references
    std::string where;       // the sandbox in messages: "boat sandbox sb-1"
  };
  NativeTransport(boost::asio::any_io_executor ex, Identity id, Progress progress);

  // PutFile, or PutNewFile with `known_missing` (a start script found no
  // file there: a provider may skip its check for an identical copy).
  virtual boost::asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode,
                                                   bool known_missing) = 0;

  // Runs a setup script with `input` on its stdin (the probe, the upload
  // checks). Default: Exec({"/bin/sh", "-c", script}) and RunScriptOn,
  // reporting the input to the upload progress.
  virtual boost::asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input);

  // Put through the shell alone: exact bytes on the script's stdin,
  // checked and installed by ShellPutFile.
  boost::asio::awaitable<absl::Status> PutByShell(std::string path, std::string_view bytes, int mode,
                                                  bool known_missing);

  // Puts `bytes` at the temporary path `tmp` through the provider's file API.
  using Uploader = std::function<boost::asio::awaitable<absl::Status>(std::string tmp, std::string_view bytes)>;
  // Put through the provider's file API: at most `max_bytes` (0: no limit);
  // a file of more than 64 KiB not known to be missing is first looked for
  // (ShellHasFile); the bytes go to a temporary name beside `path`
  // (`upload`), then one script checks their sha256, chmods and renames
  // them into place (ShellPlaceFile): never a partial file at `path`.
  boost::asio::awaitable<absl::Status> PutByUpload(std::string path, std::string_view bytes, int mode,
                                                   bool known_missing, std::size_t max_bytes, const Uploader& upload);

  // A RunScript that ran a script again after its answer was lost
  // (OUTCOME_UNKNOWN: the first run may have done its work) says so here:
  // a placing script that then fails is followed by a check whether the
  // file is in place after all.
  void NoteUnknownRerun() { ++unknown_reruns_; }

  // {"/bin/sh", "-c", script}: how RunScript runs a script over Exec.
  static std::vector<std::string> ShellArgv(std::string script);

  // RunScript as a ShellRunner (for shell_setup.h's helpers).
  const ShellRunner& runner() const { return runner_; }
  const Progress& progress() const { return progress_; }
  const std::string& where() const { return where_; }
  // The upload cache: path + "\n" + sha256 verified in this sandbox.
  std::set<std::string>& installed() { return installed_; }

 private:
  boost::asio::any_io_executor ex_;
  std::string name_, sandbox_id_, where_;
  Progress progress_;
  std::optional<SandboxInfo> info_;
  std::set<std::string> installed_;
  std::uint64_t unknown_reruns_ = 0;
  // Temporary names of this transport's failed uploads (at most
  // kMaxLeftovers): the next placing script removes them.
  std::vector<std::string> leftovers_;
  ShellRunner exec_runner_ = ExecShellRunner(*this, progress_);
  ShellRunner runner_ = [this](std::string script, std::string_view input) {
    return RunScript(std::move(script), input);
  };
};

}  // namespace tether::native
