#!/usr/bin/env node
// A fault-injecting byte proxy in front of a Unix socket: for a real engine
// that has no emulator of ours (podman's Docker API service), the faults an
// emulator would inject. Each accepted connection is piped to the upstream
// socket unchanged, unless its seeded dice say otherwise:
//
//   node tests/lib/fault_proxy.mjs --listen SOCK --upstream SOCK --dir DIR --faults SPEC
//
//   cut=P       per chunk read from upstream: the connection is destroyed
//               (both sides) after a random part of that chunk went on: a
//               cut mid-answer or mid-stream (an exec's hijacked stream
//               included).
//   http503=P   the connection's first request is answered 503 here and the
//               connection closed; upstream never sees it (a proxy that
//               refused it: nothing took effect).
//   slow=P      the connection is held 1-3 s before it is piped.
//   seed=N      the PRNG seed (default 1).
//
// Logs "FAULT <kind>" per fault injected (and one line per connection) to
// DIR/requests.log; prints {"listen": SOCK} on stdout once listening; runs
// until SIGTERM/SIGINT or EOF on stdin.
import fs from 'node:fs';
import net from 'node:net';

import { Faults } from '../emulators/lib/faults.mjs';
import { announceAndWait, parseArgs, RequestLog, sleep } from '../emulators/lib/server.mjs';

const USAGE = 'node fault_proxy.mjs --listen SOCK --upstream SOCK --dir DIR [--faults SPEC]';
const args = parseArgs(process.argv.slice(2), { usage: USAGE, valued: ['listen', 'upstream'] });
if (!args.listen || !args.upstream) {
  process.stderr.write(`--listen and --upstream are required\nusage: ${USAGE}\n`);
  process.exit(2);
}
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['cut', 'http503', 'slow'], flags: [] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
const log = new RequestLog(args.dir);
let cutRng = (0x9e3779b9 ^ faults.seed) >>> 0 || 1;
const cutPoint = (n) => {
  // xorshift32: 0..n-1 bytes of the chunk go on before the cut
  cutRng ^= cutRng << 13; cutRng >>>= 0;
  cutRng ^= cutRng >>> 17;
  cutRng ^= cutRng << 5; cutRng >>>= 0;
  return cutRng % n;
};

let serial = 0;
const server = net.createServer(async (client) => {
  const id = ++serial;
  client.on('error', () => {});
  const slow = faults.roll('slow');
  const refuse = faults.roll('http503');
  log.line(`conn ${id}`, 'open');
  if (slow) {
    const ms = faults.slowDelayMs();
    log.line(`conn ${id}`, 'FAULT slow', ms, 'ms');
    client.pause();
    await sleep(ms);
    client.resume();
  }
  if (refuse) {
    // Wait for the first bytes of a request, then refuse it.
    client.once('data', () => {
      log.line(`conn ${id}`, 'FAULT http503');
      client.end('HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 32\r\n' +
                 'Connection: close\r\n\r\n503 from the fault proxy (test)\n');
    });
    return;
  }
  const up = net.createConnection(args.upstream);
  up.on('error', () => client.destroy());
  client.on('close', () => up.destroy());
  up.on('close', () => client.destroy());
  client.pipe(up);
  let passed = 0;
  let cut = false;
  up.on('data', (chunk) => {
    if (cut) return;
    if (faults.roll('cut')) {
      cut = true;
      const keep = cutPoint(chunk.length);
      log.line(`conn ${id}`, 'FAULT cut', 'after', passed + keep, 'bytes');
      up.pause();
      client.write(chunk.subarray(0, keep), () => {
        client.destroy();
        up.destroy();
      });
      return;
    }
    passed += chunk.length;
    if (!client.write(chunk)) {
      up.pause();
      client.once('drain', () => up.resume());
    }
  });
});
server.on('error', (e) => {
  process.stderr.write(`fault_proxy: ${e.message}\n`);
  process.exit(1);
});
try {
  fs.rmSync(args.listen, { force: true });
} catch {}
server.listen(args.listen, () => {
  fs.chmodSync(args.listen, 0o600);
  log.line('listening', args.listen, `faults=${faults.describe()}`);
  announceAndWait(args.dir, { listen: args.listen }, (why) => {
    log.line('shutdown', why, JSON.stringify(faults.count));
    server.close();
  });
});
