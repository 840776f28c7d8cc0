/**
 * TLS certificates for the test servers, made at test time by the `openssl` command: a CA of its own and a
 * server certificate it signed for 127.0.0.1 and localhost, in a temp folder. Nothing trusts the CA but a
 * client given `ca`: a client on Node's default store must refuse the server (the tests check both).
 */
import { execFile } from 'node:child_process'
import { chmodSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { type TempDir, tempDir } from './temp.js'

export interface TestCerts {
  /** The folder holding the files below (`cleanup()` removes it). */
  readonly folder: TempDir
  /** Paths of the PEM files. */
  readonly caFile: string
  readonly certFile: string
  readonly keyFile: string
  /** The CA certificate's PEM, for a client's `ca`. */
  readonly ca: Buffer
}

/** A fresh CA and a server certificate for 127.0.0.1/localhost signed by it (RSA 2048, valid a day). */
export async function makeCerts(): Promise<TestCerts> {
  const openssl = (args: string[]) => promisify(execFile)('openssl', args, { cwd: folder.path })
  const folder = tempDir('certs')
  try {
    const at = (name: string) => join(folder.path, name)
    await openssl([
      ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1'],
      ...['-keyout', at('ca.key'), '-out', at('ca.pem'), '-subj', '/CN=fencelock test CA'],
    ])
    await openssl([
      ...['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', at('server.key'), '-out', at('server.csr')],
      ...['-subj', '/CN=localhost'],
    ])
    writeFileSync(at('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n')
    await openssl([
      ...['x509', '-req', '-in', at('server.csr'), '-CA', at('ca.pem'), '-CAkey', at('ca.key')],
      ...['-CAcreateserial', '-days', '1', '-extfile', at('san.ext'), '-out', at('server.pem')],
    ])
    // PostgreSQL refuses a key file others can read.
    chmodSync(at('server.key'), 0o600)
    return {
      folder,
      caFile: at('ca.pem'),
      certFile: at('server.pem'),
      keyFile: at('server.key'),
      ca: readFileSync(at('ca.pem')),
    }
  } catch (error) {
    folder.cleanup()
    throw new Error(`Could not make test certificates with openssl (apt-get install openssl): ${error}`, {
      cause: error,
    })
  }
}
