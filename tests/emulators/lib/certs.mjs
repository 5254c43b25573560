// A throwaway test CA and a server certificate for 127.0.0.1 / localhost,
// made with the openssl CLI (EC P-256, valid 30 days). Files written to DIR:
//   ca.pem, ca-key.pem, server.pem (leaf only), server-key.pem, server-chain.pem
// Usage as a library: `const c = makeCerts(dir)`; as a CLI:
//   node tests/emulators/lib/certs.mjs DIR   (prints the JSON of paths)
// TETHER_EMULATOR_CERT=expired or wrong-host in the environment makes the
// server certificate one a client must refuse: valid only in January 2020
// (still signed by ca.pem), or for elsewhere.invalid only (no IP, not
// localhost). tests/cli/tls_test.sh runs every emulator with each.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

function openssl(args, cwd) {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

export function makeCerts(dir) {
  const kind = process.env.TETHER_EMULATOR_CERT ?? '';
  if (!['', 'expired', 'wrong-host'].includes(kind)) throw new Error(`TETHER_EMULATOR_CERT=${kind}: expired or wrong-host`);
  const wrongHost = kind === 'wrong-host';
  fs.mkdirSync(dir, { recursive: true });
  const p = (name) => path.join(dir, name);
  const curve = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...curve, '-keyout', p('ca-key.pem'), '-out', p('ca.pem'),
           '-days', '30', '-subj', '/CN=tether emulator test CA',
           '-addext', 'basicConstraints=critical,CA:TRUE',
           '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
           '-addext', 'subjectKeyIdentifier=hash'], dir);
  openssl(['req', '-new', ...curve, '-keyout', p('server-key.pem'), '-out', p('server.csr'),
           '-subj', '/CN=localhost'], dir);
  fs.writeFileSync(p('server-ext.cnf'), [
    'basicConstraints=critical,CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=serverAuth',
    wrongHost ? 'subjectAltName=DNS:elsewhere.invalid' : 'subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost',
    'subjectKeyIdentifier=hash',
    'authorityKeyIdentifier=keyid',
    '',
  ].join('\n'));
  if (kind === 'expired') {
    // `openssl x509 -req` cannot backdate; `openssl ca` can.
    fs.writeFileSync(p('ca.cnf'), [
      '[ca]', 'default_ca = d', '[d]', 'database = ca-index.txt', 'new_certs_dir = .', 'serial = ca-serial',
      'default_md = sha256', 'policy = p', 'unique_subject = no', '[p]', 'commonName = supplied', '',
    ].join('\n'));
    fs.writeFileSync(p('ca-index.txt'), '');
    fs.writeFileSync(p('ca-serial'), randomBytes(8).toString('hex') + '\n');
    openssl(['ca', '-batch', '-config', p('ca.cnf'), '-cert', p('ca.pem'), '-keyfile', p('ca-key.pem'),
             '-in', p('server.csr'), '-out', p('server.pem'), '-notext', '-extfile', p('server-ext.cnf'),
             '-startdate', '20200101000000Z', '-enddate', '20200201000000Z'], dir);
    for (const f of fs.readdirSync(dir)) {
      if (/^ca-(index|serial)|^ca\.cnf$|^[0-9A-F]+\.pem$/.test(f)) fs.rmSync(p(f));
    }
  } else {
    openssl(['x509', '-req', '-in', p('server.csr'), '-CA', p('ca.pem'), '-CAkey', p('ca-key.pem'),
             '-set_serial', '0x' + randomBytes(8).toString('hex'), '-days', '30',
             '-extfile', p('server-ext.cnf'), '-out', p('server.pem')], dir);
  }
  fs.rmSync(p('server.csr'));
  fs.writeFileSync(p('server-chain.pem'),
                   Buffer.concat([fs.readFileSync(p('server.pem')), fs.readFileSync(p('ca.pem'))]));
  for (const key of ['ca-key.pem', 'server-key.pem']) fs.chmodSync(p(key), 0o600);
  return {
    ca: p('ca.pem'),
    caKey: p('ca-key.pem'),
    cert: p('server.pem'),
    key: p('server-key.pem'),
    chain: p('server-chain.pem'),
  };
}

// A client certificate (CN=`cn`, extendedKeyUsage clientAuth) signed by the
// CA of `certs` (makeCerts' answer): PREFIX.pem and PREFIX-key.pem in DIR.
export function makeClientCert(dir, certs, cn, prefix = 'client') {
  const p = (name) => path.join(dir, name);
  const curve = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-new', ...curve, '-keyout', p(`${prefix}-key.pem`), '-out', p(`${prefix}.csr`), '-subj', `/CN=${cn}`], dir);
  fs.writeFileSync(p(`${prefix}-ext.cnf`), [
    'basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature', 'extendedKeyUsage=clientAuth', '',
  ].join('\n'));
  openssl(['x509', '-req', '-in', p(`${prefix}.csr`), '-CA', certs.ca, '-CAkey', certs.caKey,
           '-set_serial', '0x' + randomBytes(8).toString('hex'), '-days', '30',
           '-extfile', p(`${prefix}-ext.cnf`), '-out', p(`${prefix}.pem`)], dir);
  fs.rmSync(p(`${prefix}.csr`));
  fs.chmodSync(p(`${prefix}-key.pem`), 0o600);
  return { cert: p(`${prefix}.pem`), key: p(`${prefix}-key.pem`) };
}

// A CA of its own and a server certificate valid for the DNS name `name`
// only, in DIR/SUBDIR: what a server answers to the TLS server name `name`
// (a kubeconfig's tls-server-name), so that a client that does not send
// that name, or does not check the certificate against it, fails.
export function makeNamedServerCert(dir, subdir, name) {
  const d = path.join(dir, subdir);
  const saved = process.env.TETHER_EMULATOR_CERT;
  delete process.env.TETHER_EMULATOR_CERT;
  try {
    const c = makeCerts(d);
    const p = (f) => path.join(d, f);
    fs.writeFileSync(p('named-ext.cnf'), [
      'basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth', `subjectAltName=DNS:${name}`, '',
    ].join('\n'));
    const curve = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    openssl(['req', '-new', ...curve, '-keyout', p('named-key.pem'), '-out', p('named.csr'), '-subj', `/CN=${name}`], d);
    openssl(['x509', '-req', '-in', p('named.csr'), '-CA', c.ca, '-CAkey', c.caKey,
             '-set_serial', '0x' + randomBytes(8).toString('hex'), '-days', '30',
             '-extfile', p('named-ext.cnf'), '-out', p('named.pem')], d);
    fs.rmSync(p('named.csr'));
    return { ca: c.ca, cert: p('named.pem'), key: p('named-key.pem') };
  } finally {
    if (saved !== undefined) process.env.TETHER_EMULATOR_CERT = saved;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const dir = process.argv[2];
  if (!dir) {
    process.stderr.write('usage: node certs.mjs DIR\n');
    process.exit(2);
  }
  process.stdout.write(JSON.stringify(makeCerts(path.resolve(dir))) + '\n');
}
