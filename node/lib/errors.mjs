// Errors carry the stable codes of include/tether/errors.h, the same table as
// C, C++ and Python: `err.code === "OUTCOME_UNKNOWN"`, and one Error subclass
// per code for `instanceof`.
export class TetherError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = "TetherError";
    this.code = code;
  }
}

const CODES = [
  ["INVALID_ARGUMENT", "InvalidArgumentError"],
  ["UNSUPPORTED", "UnsupportedError"],
  ["UNAVAILABLE", "UnavailableError"],
  ["BUSY", "BusyError"],
  ["EXPIRED", "ExpiredError"],
  ["INPUT_CLOSED", "InputClosedError"],
  ["OUTCOME_UNKNOWN", "OutcomeUnknownError"],
  ["NOT_FOUND", "NotFoundError"],
  ["PERMISSION_DENIED", "PermissionDeniedError"],
  ["PROTOCOL", "ProtocolError"],
  ["CANCELLED", "CancelledError"],
  ["OUTPUT_CAPACITY", "OutputCapacityError"],
  ["WAIT_ABORTED", "WaitAbortedError"],
  ["RESOURCE_EXHAUSTED", "ResourceExhaustedError"],
  ["INTERNAL", "InternalError"],
];

export const errorClasses = {};
for (const [code, name] of CODES) {
  const cls = {
    [name]: class extends TetherError {
      constructor(message, options) {
        super(code, message, options);
        this.name = name;
      }
    },
  }[name];
  errorClasses[code] = cls;
}

export const {
  InvalidArgumentError,
  UnsupportedError,
  UnavailableError,
  BusyError,
  ExpiredError,
  InputClosedError,
  OutcomeUnknownError,
  NotFoundError,
  PermissionDeniedError,
  ProtocolError,
  CancelledError,
  OutputCapacityError,
  WaitAbortedError,
  ResourceExhaustedError,
  InternalError,
} = Object.fromEntries(CODES.map(([code, name]) => [name, errorClasses[code]]));

// An error of ours from `code` and `message`.
export function makeError(code, message, options) {
  const cls = errorClasses[code] ?? errorClasses.INTERNAL;
  return new cls(message || code, options);
}

// The addon's errors (plain Errors with a code) as ours; anything else as is.
export function fromNative(e) {
  if (e instanceof TetherError) return e;
  if (e && typeof e.code === "string" && errorClasses[e.code]) return makeError(e.code, e.message);
  return e;
}
