// Plumbing shared by the emulators: command line, request log, body reading,
// the ready line and shutdown.
import fs from 'node:fs';
import path from 'node:path';

// Parses `--dir DIR [--tls] [--faults SPEC] [--NAME VALUE...]`. `valued` lists
// the extra options that take a value. Exits with code 2 on a usage error.
export function parseArgs(argv, { usage, valued = [] }) {
  const out = { dir: undefined, tls: false, faults: '' };
  const fail = (msg) => {
    process.stderr.write(`${msg}\nusage: ${usage}\n`);
    process.exit(2);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--dir') out.dir = value();
    else if (a === '--tls') out.tls = true;
    else if (a === '--faults') out.faults = value();
    else if (valued.includes(a.slice(2)) && a.startsWith('--')) out[a.slice(2)] = value();
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`usage: ${usage}\n`);
      process.exit(0);
    } else fail(`unknown argument '${a}'`);
  }
  if (!out.dir) fail('--dir is required');
  out.dir = path.resolve(out.dir);
  fs.mkdirSync(out.dir, { recursive: true });
  return out;
}

// Appends one line per event to DIR/requests.log. Callers pass only methods,
// paths and outcomes: never headers, tokens or bodies.
export class RequestLog {
  constructor(dir) {
    this.fd = fs.openSync(path.join(dir, 'requests.log'), 'a');
  }
  line(...parts) {
    fs.writeSync(this.fd, `${new Date().toISOString()} ${parts.join(' ')}\n`);
  }
}

// Reads a request body up to `limit` bytes; resolves null when it is larger
// (the rest is drained and discarded).
export function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    let over = false;
    req.on('data', (c) => {
      if (over) return;
      size += c.length;
      if (size > limit) {
        over = true;
        chunks.length = 0;
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(over ? null : Buffer.concat(chunks)));
    req.on('error', reject);
    req.on('aborted', () => reject(new Error('request aborted')));
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Writes the ready line (one JSON line on stdout, also DIR/endpoint.json) and
// arranges shutdown on SIGTERM/SIGINT and on EOF of a piped stdin. A stdin
// that is /dev/null or a file is ignored, so `node emu.mjs ... &` keeps running.
export function announceAndWait(dir, info, onShutdown) {
  const line = JSON.stringify(info);
  fs.writeFileSync(path.join(dir, 'endpoint.json'), line + '\n');
  process.stdout.write(line + '\n');
  let done = false;
  const stop = (why) => {
    if (done) return;
    done = true;
    try { onShutdown(why); } finally { process.exit(0); }
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  let st;
  try { st = fs.fstatSync(0); } catch { st = null; }
  if (st && (st.isFIFO() || st.isSocket())) {
    process.stdin.on('data', () => {});
    process.stdin.on('end', () => stop('stdin EOF'));
    process.stdin.on('error', () => stop('stdin error'));
    process.stdin.resume();
  }
}
