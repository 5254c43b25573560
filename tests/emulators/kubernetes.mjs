#!/usr/bin/env node
// Kubernetes emulator: the slice of the API server that `kubectl exec` uses,
// for one pod whose "container" is a local scratch directory with real
// processes. Wire facts: /work/shared/EMULATORS.md section 4 and PROVIDERS.md.
//
// Command line (the C++ tests rely on it exactly):
//   node tests/emulators/kubernetes.mjs --dir DIR [--tls] [--faults SPEC]
//     --dir DIR       scratch directory: kubeconfig, requests.log,
//                     endpoint.json, certificates (with --tls) and the pod's
//                     sandbox DIR/pod-test/ (home/ is HOME and the cwd of
//                     every exec, tmp/ is TMPDIR).
//     --tls           serve HTTPS (HTTP/1.1) with a throwaway CA in DIR/ca.pem;
//                     otherwise plain HTTP (the kubeconfig then says
//                     insecure-skip-tls-verify: true, which the SDKs require
//                     for http://).
//     --faults SPEC   seeded fault injection, see below.
//   Listens on 127.0.0.1, port 0. When ready it prints ONE JSON line on stdout
//   (also written to DIR/endpoint.json):
//     {"url":"https://127.0.0.1:P" (http:// without --tls),
//      "ca":"DIR/ca.pem" (null without --tls), "kubeconfig":"DIR/kubeconfig",
//      "namespace":"default","pod":"pod-test","container":"main",
//      "token":"<bearer token, random per run>","forbidden_pod":"pod-restricted"}
//   DIR/kubeconfig has one cluster (certificate-authority-data, or
//   insecure-skip-tls-verify without --tls), one user with the bearer token,
//   one context "emulator" and current-context. With --tls, three more
//   reach the same pod: DIR/kubeconfig-cert (a client certificate, CN
//   tether-client, signed by DIR/ca.pem), DIR/kubeconfig-tokenfile (tokenFile)
//   and DIR/kubeconfig-named (tls-server-name kubernetes.emulator.invalid,
//   answered with a certificate for that name only, from DIR/named/ca.pem). The emulator runs until
//   SIGTERM/SIGINT or EOF on stdin (when stdin is a pipe), then SIGKILLs the
//   process groups it started and exits 0. Exit code 2: bad command line.
//
// Endpoints (all need Authorization: Bearer <token>, else 401 Status):
//   The token may get both pods but exec only into pod-test: an exec into
//   pod-restricted (forbidden_pod in the ready line) is 403 with the RBAC
//   Status {reason:"Forbidden", code:403, message:'pods "pod-restricted" is
//   forbidden: User ... cannot create resource "pods/exec" ...'}.
//   GET /version, /api, /apis, /api/v1              (minimal discovery)
//   GET /api/v1/namespaces/{ns}/pods                (PodList)
//   GET /api/v1/namespaces/{ns}/pods/{pod}          (Pod JSON; 404 Status otherwise)
//   GET /api/v1/namespaces/{ns}/pods/{pod}/exec?command=..&command=..
//       &stdin=&stdout=&stderr=&tty=false&container=   as a WebSocket upgrade.
//     Subprotocol: v5.channel.k8s.io when offered, else v4.channel.k8s.io
//     (neither offered: 400). Binary frames, first byte = channel: 0 stdin,
//     1 stdout, 2 stderr, 3 status (JSON metav1.Status), 4 resize (ignored),
//     255 close-channel ([255,0] closes the process's stdin, v5 only).
//     As the real server does, an empty frame on the lowest writable channel
//     (1, else 2, else 3) announces the connection. At exit: the status frame
//     {"metadata":{},"status":"Success"} or Failure/NonZeroExitCode with
//     details.causes [{reason:"ExitCode",message:"<code>"}] (a signal gives
//     128+N), then a close frame 1000. The status is sent once the process
//     has exited and its output pipes reached EOF. A command that cannot start gives
//     Failure/InternalError code 500. No reattach: each exec is a new process.
//     A client that closes the WebSocket (v4's way to say stdin EOF) or is cut
//     off gets its process's stdin closed; the process is left to exit by itself
//     (its further output is discarded), as with a real orphaned exec.
//     Backpressure: while more than kMaxUnflushedBytes of frames wait for the
//     socket, the process's output is not read, so a client that does not
//     read blocks the process in write(2).
//   No tty: tty=true is refused with 400 (unfaithful: the real server allocates one).
//
// Faults (--faults SPEC, comma-separated; see lib/faults.mjs):
//   seed=N      PRNG seed (default 1), reproducible per request order.
//   cut=P       per stdout/stderr frame: write a partial WebSocket frame, then
//               destroy the socket (no status, no close frame).
//   http5xx=P   per request (REST and exec upgrade): answer 502 / 503
//               (alternating) without doing anything.
//   slow=P      per request: delay the response (or the upgrade) by 1-3 s.
//   noclose=P   per exec: when the process ends, close the TCP connection
//               after the output, without a status frame and without a close frame.
//   v4only      negotiate v4.channel.k8s.io even when v5 is offered.
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import path from 'node:path';
import { WebSocketServer } from 'ws';

import { makeCerts, makeClientCert, makeNamedServerCert } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import { Sandbox, signalNumber } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node kubernetes.mjs --dir DIR [--tls] [--faults SPEC]';
const NAMESPACE = 'default';
const POD = 'pod-test';
// A second pod that the token may read but not exec into (an RBAC Role
// without create on pods/exec for it): exec is 403 Forbidden.
const FORBIDDEN_POD = 'pod-restricted';
const SERVICE_ACCOUNT = 'system:serviceaccount:default:tether';
const CONTAINER = 'main';
const kMaxFrameData = 32 << 10;   // output is copied in 32 KiB chunks
const kMaxInboundFrame = 16 << 20; // largest client frame accepted
// Bytes of frames handed to the WebSocket that the socket has not taken yet.
// Above it the process's output is no longer read, so its pipe fills and it
// blocks in write(2), as the API server and kubelet streaming behind TCP flow
// control make it; the emulator's memory stays bounded.
const kMaxUnflushedBytes = 256 << 10;
const CH_STDIN = 0, CH_STDOUT = 1, CH_STDERR = 2, CH_STATUS = 3, CH_RESIZE = 4, CH_CLOSE = 255;

const args = parseArgs(process.argv.slice(2), { usage: USAGE });
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['cut', 'http5xx', 'slow', 'noclose'], flags: ['v4only'] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
const token = 'k8s-' + randomBytes(24).toString('hex');
const CLIENT_CN = 'tether-client';
const NAMED_HOST = 'kubernetes.emulator.invalid';
const log = new RequestLog(args.dir);
const sandbox = new Sandbox(path.join(args.dir, POD), { hostname: POD });
const startedAt = new Date();
const podUid = randomUUID();
const forbiddenPodUid = randomUUID();

// ---- API objects ---------------------------------------------------------------

function status(code, reason, message, details) {
  const s = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason };
  if (details) s.details = details;
  s.code = code;
  return s;
}

function podObject(name = POD) {
  const ts = startedAt.toISOString().replace(/\.\d+Z$/, 'Z');
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: {
      name, namespace: NAMESPACE, uid: name === POD ? podUid : forbiddenPodUid, resourceVersion: '1',
      creationTimestamp: ts, labels: { app: 'tether-emulator' },
    },
    spec: {
      containers: [{
        name: CONTAINER, image: 'emulator.local/sandbox:latest',
        command: ['sleep', 'infinity'], resources: {}, terminationMessagePath: '/dev/termination-log',
        terminationMessagePolicy: 'File', imagePullPolicy: 'IfNotPresent',
      }],
      restartPolicy: 'Always', terminationGracePeriodSeconds: 30, dnsPolicy: 'ClusterFirst',
      serviceAccountName: 'default', nodeName: 'emulator-node', schedulerName: 'default-scheduler',
      enableServiceLinks: true, preemptionPolicy: 'PreemptLowerPriority', priority: 0,
    },
    status: {
      phase: 'Running',
      conditions: ['PodReadyToStartContainers', 'Initialized', 'Ready', 'ContainersReady', 'PodScheduled']
        .map((type) => ({ type, status: 'True', lastProbeTime: null, lastTransitionTime: ts })),
      hostIP: '127.0.0.1', hostIPs: [{ ip: '127.0.0.1' }],
      podIP: '127.0.0.1', podIPs: [{ ip: '127.0.0.1' }],
      startTime: ts,
      containerStatuses: [{
        name: CONTAINER, state: { running: { startedAt: ts } }, lastState: {}, ready: true,
        restartCount: 0, image: 'emulator.local/sandbox:latest',
        imageID: 'emulator.local/sandbox@sha256:' + '0'.repeat(64),
        containerID: 'containerd://' + '1'.repeat(64), started: true,
      }],
      qosClass: 'BestEffort',
    },
  };
}

// ---- REST ----------------------------------------------------------------------

function sendJson(res, code, obj) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}

// The bearer token, or (with --tls) a client certificate the emulator's CA
// signed for CLIENT_CN (the user of DIR/kubeconfig-cert).
function authorized(req) {
  if (req.headers.authorization === `Bearer ${token}`) return true;
  const sock = req.socket;
  if (args.tls && sock.authorized && sock.getPeerCertificate?.()?.subject?.CN === CLIENT_CN) {
    log.line('auth', 'client certificate', `CN=${CLIENT_CN}`, sock.servername ? `sni=${sock.servername}` : '');
    return true;
  }
  return false;
}

// Resolves the pod of a path, or returns the Status to answer.
function findPod(ns, pod) {
  if (ns !== NAMESPACE || (pod !== POD && pod !== FORBIDDEN_POD)) {
    return status(404, 'NotFound', `pods "${pod}" not found`, { name: pod, kind: 'pods' });
  }
  return null;
}

async function handleRest(req, res) {
  const url = new URL(req.url, 'http://emulator');
  const label = `${req.method} ${url.pathname}${url.search}`;
  res.on('finish', () => log.line(label, '->', res.statusCode));
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
  }
  req.resume();
  if (faults.roll('http5xx')) {
    const code = faults.status5xx();
    log.line(label, 'FAULT http5xx', code);
    res.writeHead(code, { 'content-type': 'text/plain' });
    return res.end(`${code} ${http.STATUS_CODES[code]} (emulated fault)\n`);
  }
  if (!authorized(req)) return sendJson(res, 401, status(401, 'Unauthorized', 'Unauthorized'));
  if (req.method !== 'GET') return sendJson(res, 405, status(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`));
  const p = url.pathname;
  if (p === '/version') {
    return sendJson(res, 200, {
      major: '1', minor: '32', gitVersion: 'v1.32.0-tether-emulator', gitCommit: '0'.repeat(40),
      gitTreeState: 'clean', buildDate: startedAt.toISOString(), goVersion: 'go1.23', compiler: 'gc',
      platform: 'linux/amd64',
    });
  }
  if (p === '/api') {
    return sendJson(res, 200, { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: '127.0.0.1' }] });
  }
  if (p === '/apis') return sendJson(res, 200, { kind: 'APIGroupList', apiVersion: 'v1', groups: [] });
  if (p === '/api/v1') {
    return sendJson(res, 200, {
      kind: 'APIResourceList', groupVersion: 'v1', resources: [
        { name: 'pods', singularName: 'pod', namespaced: true, kind: 'Pod', verbs: ['get', 'list'], shortNames: ['po'] },
        { name: 'pods/exec', singularName: '', namespaced: true, kind: 'PodExecOptions', verbs: ['create', 'get'] },
      ],
    });
  }
  let m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/?$/.exec(p);
  if (m) {
    const items = decodeURIComponent(m[1]) === NAMESPACE ? [podObject(), podObject(FORBIDDEN_POD)] : [];
    for (const i of items) { delete i.kind; delete i.apiVersion; }
    return sendJson(res, 200, { kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items });
  }
  m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/.exec(p);
  if (m) {
    const err = findPod(decodeURIComponent(m[1]), decodeURIComponent(m[2]));
    return err ? sendJson(res, err.code, err) : sendJson(res, 200, podObject(decodeURIComponent(m[2])));
  }
  m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/.exec(p);
  if (m) return sendJson(res, 400, status(400, 'BadRequest', 'Upgrade request required'));
  return sendJson(res, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
}

// ---- exec over WebSocket -------------------------------------------------------

const wss = new WebSocketServer({
  noServer: true,
  perMessageDeflate: false, // the API server's websocket library has no compression
  maxPayload: kMaxInboundFrame,
  handleProtocols: (offered) => chooseProtocol(offered),
});

function chooseProtocol(offered) {
  if (offered.has('v5.channel.k8s.io') && !faults.flag('v4only')) return 'v5.channel.k8s.io';
  if (offered.has('v4.channel.k8s.io')) return 'v4.channel.k8s.io';
  return false;
}

function rejectUpgrade(socket, code, body) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const type = typeof body === 'string' ? 'text/plain' : 'application/json';
  socket.end(`HTTP/1.1 ${code} ${http.STATUS_CODES[code]}\r\nContent-Type: ${type}\r\n` +
             `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
}

function boolParam(q, name) {
  const v = q.get(name);
  return v === 'true' || v === '1';
}

async function handleUpgrade(req, socket, head) {
  const url = new URL(req.url, 'http://emulator');
  const label = `exec ${url.pathname}`;
  socket.on('error', () => {});
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
    if (socket.destroyed) {
      log.line(label, 'client gone during the delay: request dropped');
      return;
    }
  }
  if (faults.roll('http5xx')) {
    const code = faults.status5xx();
    log.line(label, 'FAULT http5xx', code);
    return rejectUpgrade(socket, code, `${code} ${http.STATUS_CODES[code]} (emulated fault)\n`);
  }
  if (!authorized(req)) {
    log.line(label, '-> 401');
    return rejectUpgrade(socket, 401, status(401, 'Unauthorized', 'Unauthorized'));
  }
  const m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/.exec(url.pathname);
  if (!m || req.method !== 'GET') {
    log.line(label, '-> 404');
    return rejectUpgrade(socket, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
  }
  const podErr = findPod(decodeURIComponent(m[1]), decodeURIComponent(m[2]));
  if (podErr) {
    log.line(label, '-> 404');
    return rejectUpgrade(socket, 404, podErr);
  }
  if (decodeURIComponent(m[2]) === FORBIDDEN_POD) {
    // RBAC runs before the pod is looked at: the authorizer's Status.
    log.line(label, '-> 403');
    return rejectUpgrade(socket, 403, status(403, 'Forbidden',
      `pods "${FORBIDDEN_POD}" is forbidden: User "${SERVICE_ACCOUNT}" cannot create resource "pods/exec" in API group "" in the namespace "${NAMESPACE}"`,
      { name: FORBIDDEN_POD, kind: 'pods' }));
  }
  const q = url.searchParams;
  const bad = (msg) => {
    log.line(label, '-> 400', msg);
    rejectUpgrade(socket, 400, status(400, 'BadRequest', msg));
  };
  const container = q.get('container') ?? CONTAINER;
  if (container !== CONTAINER) return bad(`container ${container} is not valid for pod ${POD}`);
  const command = q.getAll('command');
  if (!command.length) return bad('you must specify at least one command for the container');
  const opts = { stdin: boolParam(q, 'stdin'), stdout: boolParam(q, 'stdout'), stderr: boolParam(q, 'stderr'), tty: boolParam(q, 'tty') };
  if (!opts.stdin && !opts.stdout && !opts.stderr) return bad('you must specify at least 1 of stdin, stdout, stderr');
  if (opts.tty) return bad('tty=true is not supported by this emulator');
  const offered = new Set((req.headers['sec-websocket-protocol'] ?? '').split(',').map((s) => s.trim()).filter(Boolean));
  if (!chooseProtocol(offered)) return bad('none of the offered subprotocols is supported (v5.channel.k8s.io, v4.channel.k8s.io)');
  wss.handleUpgrade(req, socket, head, (ws) => runExec(ws, socket, command, opts, label));
}

function statusSuccess() {
  return { metadata: {}, status: 'Success' };
}

function statusExit(code, command) {
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ${code}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(code) }] },
  };
}

function statusInternal(message) {
  const text = `Internal error occurred: error executing command in container: ${message}`;
  return { metadata: {}, status: 'Failure', message: text, reason: 'InternalError', details: { causes: [{ message: text }] }, code: 500 };
}

function frame(channel, data) {
  const b = Buffer.alloc(1 + data.length);
  b[0] = channel;
  data.copy(b, 1);
  return b;
}

// A binary WebSocket frame header (server frames are not masked).
function rawFrameHeader(len) {
  if (len < 126) return Buffer.from([0x82, len]);
  if (len < 65536) {
    const h = Buffer.alloc(4);
    h[0] = 0x82; h[1] = 126; h.writeUInt16BE(len, 2);
    return h;
  }
  const h = Buffer.alloc(10);
  h[0] = 0x82; h[1] = 127; h.writeBigUInt64BE(BigInt(len), 2);
  return h;
}

function runExec(ws, socket, command, opts, label) {
  const proto = ws.protocol;
  const v5 = proto === 'v5.channel.k8s.io';
  const noclose = faults.roll('noclose');
  let open = true; // the WebSocket is usable by us
  // (Armed is not injected: "FAULT noclose" is logged when it fires, one
  // FAULT line per fault injected, as in the other emulators.)
  log.line(label, 'upgraded', proto, JSON.stringify(command), `stdin=${opts.stdin}`, noclose ? 'noclose armed' : '');

  const send = (buf) => { if (open) ws.send(buf); };
  // Announce the connection like the API server: an empty frame on the lowest writable channel.
  send(Buffer.from([opts.stdout ? CH_STDOUT : opts.stderr ? CH_STDERR : CH_STATUS]));

  const r = sandbox.spawn(command[0], command.slice(1), { stdin: opts.stdin });
  if (r.error) {
    const msg = r.error.kind === 'cwd' ? r.error.message
      : `failed to exec in container: OCI runtime exec failed: exec failed: unable to start container process: ${r.error.message}: unknown`;
    log.line(label, 'cannot start:', msg);
    send(frame(CH_STATUS, Buffer.from(JSON.stringify(statusInternal(msg)))));
    if (open) ws.close(1000);
    open = false;
    return;
  }
  const child = r.child;
  log.line(label, 'pid', child.pid);
  let stdinClosed = !opts.stdin;
  const closeStdin = () => {
    if (!stdinClosed) {
      stdinClosed = true;
      child.stdin.end();
    }
  };

  const cut = (channel, data) => {
    open = false;
    log.line(label, 'FAULT cut pid', child.pid);
    const payload = frame(channel, data);
    const partial = Buffer.concat([rawFrameHeader(payload.length), payload.subarray(0, Math.max(1, payload.length >> 1))]);
    socket.write(partial, () => socket.destroy());
    closeStdin();
  };
  // Backpressure: stop reading the output while the socket lags behind.
  let unflushed = 0;
  let paused = false;
  let pauses = 0;
  const flow = () => {
    const blocked = open && unflushed > kMaxUnflushedBytes;
    if (blocked === paused) return;
    paused = blocked;
    if (blocked && ++pauses === 1) log.line(label, 'pid', child.pid, 'output paused: the socket holds', kMaxUnflushedBytes, 'bytes unflushed');
    for (const pipe of [child.stdout, child.stderr]) {
      if (blocked) pipe.pause();
      else pipe.resume();
    }
  };
  const output = (channel, enabled) => (buf) => {
    if (!open || !enabled) return; // nobody to deliver to: discarded
    for (let off = 0; off < buf.length && open; off += kMaxFrameData) {
      const piece = buf.subarray(off, off + kMaxFrameData);
      if (faults.roll('cut')) return cut(channel, piece);
      const f = frame(channel, piece);
      unflushed += f.length;
      ws.send(f, () => {
        unflushed -= f.length;
        flow();
      });
    }
    flow();
  };
  child.stdout.on('data', output(CH_STDOUT, opts.stdout));
  child.stderr.on('data', output(CH_STDERR, opts.stderr));

  ws.on('message', (data, isBinary) => {
    if (!isBinary || !data.length) return;
    const ch = data[0];
    if (ch === CH_STDIN) {
      if (!stdinClosed && data.length > 1) child.stdin.write(data.subarray(1));
    } else if (ch === CH_CLOSE && v5 && data.length >= 2 && data[1] === CH_STDIN) {
      log.line(label, 'stdin closed by client (v5 close frame)');
      closeStdin();
    } else if (ch === CH_RESIZE) {
      // no tty: nothing to resize
    }
  });
  ws.on('close', () => {
    if (open) log.line(label, 'client closed the WebSocket; stdin closed, process left running');
    open = false;
    closeStdin();
    flow(); // nobody reads any more: the output is read and discarded
  });
  ws.on('error', () => {});

  child.on('close', (code, signal) => {
    const exit = code !== null ? code : 128 + signalNumber(signal);
    log.line(label, 'pid', child.pid, 'exited', exit, `backpressure_pauses=${pauses}`, open ? '' : '(nobody attached)');
    if (!open) return;
    if (noclose) {
      open = false;
      log.line(label, 'FAULT noclose');
      socket.end(() => socket.destroy());
      return;
    }
    const st = exit === 0 ? statusSuccess() : statusExit(exit, command);
    ws.send(frame(CH_STATUS, Buffer.from(JSON.stringify(st))));
    open = false;
    ws.close(1000);
  });
}

// ---- server ----------------------------------------------------------------------

let server;
let ca = null;
let named = null;
if (args.tls) {
  const certs = makeCerts(args.dir);
  ca = certs.ca;
  makeClientCert(args.dir, certs, CLIENT_CN);
  // Asked for by NAMED_HOST (SNI), the server answers with a certificate for
  // that name only, from a CA of its own (DIR/named/ca.pem); otherwise with
  // the usual one. Client certificates are asked for, checked against
  // DIR/ca.pem, and optional (the token is the other way in).
  named = makeNamedServerCert(args.dir, 'named', NAMED_HOST);
  const clientCa = fs.readFileSync(certs.ca);
  const namedContext = tls.createSecureContext({
    key: fs.readFileSync(named.key), cert: fs.readFileSync(named.cert), ca: clientCa,
  });
  server = https.createServer({
    key: fs.readFileSync(certs.key), cert: fs.readFileSync(certs.chain), ca: clientCa,
    requestCert: true, rejectUnauthorized: false,
    SNICallback: (servername, cb) => cb(null, servername === NAMED_HOST ? namedContext : undefined),
  });
} else {
  server = http.createServer();
}
server.on('request', (req, res) => {
  handleRest(req, res).catch((e) => {
    log.line('internal error', String(e?.stack ?? e).split('\n')[0]);
    if (!res.headersSent) sendJson(res, 500, status(500, 'InternalError', 'emulator internal error'));
  });
});
server.on('upgrade', (req, socket, head) => {
  handleUpgrade(req, socket, head).catch((e) => {
    log.line('internal error', String(e?.stack ?? e).split('\n')[0]);
    socket.destroy();
  });
});
server.on('clientError', (_e, socket) => socket.destroy());

function yamlString(s) {
  return JSON.stringify(s); // a JSON string is a valid YAML double-quoted scalar
}

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const url = `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  const kubeconfig = path.join(args.dir, 'kubeconfig');
  const clusterLines = args.tls
    ? [`    certificate-authority-data: ${fs.readFileSync(ca).toString('base64')}`]
    : ['    insecure-skip-tls-verify: true'];
  fs.writeFileSync(kubeconfig, [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: emulator',
    '  cluster:',
    `    server: ${yamlString(url)}`,
    ...clusterLines,
    'users:',
    '- name: emulator',
    '  user:',
    `    token: ${yamlString(token)}`,
    'contexts:',
    '- name: emulator',
    '  context:',
    '    cluster: emulator',
    '    user: emulator',
    `    namespace: ${NAMESPACE}`,
    'current-context: emulator',
    'preferences: {}',
    '',
  ].join('\n'), { mode: 0o600 });
  if (args.tls) {
    // The same cluster and user three more ways, as kubectl reads them:
    // kubeconfig-cert: a client certificate and key (relative file paths);
    // kubeconfig-tokenfile: the token in a file (tokenFile, relative);
    // kubeconfig-named: tls-server-name NAMED_HOST with DIR/named/ca.pem,
    // which only the certificate served for that name verifies against.
    fs.writeFileSync(path.join(args.dir, 'token'), token + '\n', { mode: 0o600 });
    const variant = (file, cluster, user) => fs.writeFileSync(path.join(args.dir, file), [
      'apiVersion: v1', 'kind: Config', 'clusters:', '- name: emulator', '  cluster:',
      `    server: ${yamlString(url)}`, ...cluster, 'users:', '- name: emulator', '  user:', ...user,
      'contexts:', '- name: emulator', '  context:', '    cluster: emulator', '    user: emulator',
      `    namespace: ${NAMESPACE}`, 'current-context: emulator', '',
    ].join('\n'), { mode: 0o600 });
    variant('kubeconfig-cert', clusterLines, ['    client-certificate: client.pem', '    client-key: client-key.pem']);
    variant('kubeconfig-tokenfile', clusterLines, ['    tokenFile: token']);
    variant('kubeconfig-named', ['    certificate-authority: named/ca.pem', `    tls-server-name: ${NAMED_HOST}`],
            [`    token: ${yamlString(token)}`]);
  }
  log.line('listening', url, `faults=${faults.describe()}`);
  announceAndWait(args.dir, {
    url, ca, kubeconfig, namespace: NAMESPACE, pod: POD, container: CONTAINER, token, forbidden_pod: FORBIDDEN_POD,
  }, (why) => {
    log.line('shutdown', why);
    sandbox.killAll();
  });
});
