"""The C interface (include/tether/tether.h) through cffi's ABI mode.

libtether_c.so sits beside this file (setup.py puts it there); the
declarations below are the header's, without its macros. cffi releases the
GIL around every call, and no call here waits on a sandbox: each queues work
on the library's own thread and returns.
"""

import os

from cffi import FFI

CDEF = """
const char* tether_error_name(int code);
typedef struct tether_runtime tether_runtime;
typedef struct tether_transport tether_transport;
typedef struct tether_process tether_process;

typedef struct tether_exit {
  int has_code, code;
  int has_signal, signal;
  int core_dumped;
  int output_cut;
  int output_complete;
  uint64_t user_us, system_us, max_rss_kib;
} tether_exit;

typedef struct tether_completion {
  uint64_t token;
  int op;
  int error;
  char* message;
  tether_process* process;
  int32_t pid;
  int has_pty;
  int stream;
  uint64_t offset;
  uint8_t* data;
  size_t size;
  int state;
  tether_exit exit;
  int output_gap;
} tether_completion;

void tether_completion_release(tether_completion* c);
void tether_free_string(char* s);
tether_runtime* tether_runtime_new(void);
void tether_runtime_free(tether_runtime* rt);
int tether_runtime_fd(const tether_runtime* rt);
int tether_runtime_next(tether_runtime* rt, tether_completion* out);
void tether_cancel(tether_runtime* rt, uint64_t token);
int tether_transport_new(tether_runtime* rt, const char* provider, const char* const* flags,
                         size_t npairs, tether_transport** out, char** message);
void tether_transport_free(tether_transport* t);
const char* tether_providers(void);

typedef struct tether_start_options {
  size_t struct_size;
  const char* const* argv;
  size_t argc;
  const char* cwd;
  const char* const* env;
  size_t env_pairs;
  int inherit_env;
  int stdin_pipe;
  int pty;
  unsigned pty_cols, pty_rows;
  int output_mode;
  int output_text;
  size_t max_output_bytes;
  size_t output_window_bytes;
  int backpressure;
  int reconnect;
  unsigned setup_timeout_ms;
  const char* supervisor_path;
  int upload_supervisor;
} tether_start_options;

void tether_start_options_init(tether_start_options* o);
int tether_start(tether_runtime* rt, tether_transport* t, const tether_start_options* o, uint64_t token);
int tether_reopen(tether_runtime* rt, tether_transport* t, const char* reference, size_t reference_size,
                  int control, unsigned timeout_ms, uint64_t token);
int tether_process_write(tether_process* p, const void* data, size_t size, uint64_t token);
int tether_process_close_stdin(tether_process* p, uint64_t token);
int tether_process_read(tether_process* p, uint64_t token);
int tether_process_wait(tether_process* p, uint64_t token);
int tether_process_status(tether_process* p, uint64_t token);
int tether_process_signal(tether_process* p, const char* signal, uint64_t token);
int tether_process_terminate(tether_process* p, unsigned grace_ms, uint64_t token);
int tether_process_resize(tether_process* p, unsigned cols, unsigned rows, uint64_t token);
int tether_process_reference(tether_process* p, char** out, size_t* size, char** message);
int tether_process_disconnect(tether_process* p, uint64_t token);
int tether_process_detach(tether_process* p, uint64_t token);
void tether_process_free(tether_process* p);
"""

# enum tether_op
OP_START, OP_REOPEN, OP_WRITE, OP_CLOSE_STDIN, OP_READ, OP_WAIT, OP_STATUS = 1, 2, 3, 4, 5, 6, 7
OP_SIGNAL, OP_TERMINATE, OP_RESIZE, OP_DISCONNECT, OP_DETACH = 8, 9, 10, 11, 12
STREAM_END, STREAM_STDOUT, STREAM_STDERR, STREAM_PTY = 0, 1, 2, 3
STATE_RUNNING, STATE_EXITED, STATE_UNKNOWN = 0, 1, 2
OUTPUT_FINITE, OUTPUT_STREAM = 0, 1
E_WAIT_ABORTED = 13

ffi = FFI()
ffi.cdef(CDEF)


def _library_path():
    path = os.environ.get("TETHER_LIBRARY")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtether_c.so")


lib = ffi.dlopen(_library_path())
