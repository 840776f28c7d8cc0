/**
 * Whether a PostgreSQL server accepts TLS, asked on a connection of its own: the protocol's SSLRequest
 * (8 bytes) answered by one byte, `S` (yes) or `N` (no: `ssl` is off on it). Asked only after a
 * connection that required TLS failed: postgres.js, told `N`, starts its handshake anyway, the server
 * drops it, and the failure reads "connection reset", which waiting would repeat until the timeout.
 */
import { connect } from 'node:net'

/** SSLRequest: length 8, then the code 80877103 (1234 << 16 | 5679). */
const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])

/**
 * Asks `host:port`: `true` for `S`, `false` for `N`, `undefined` when it could not tell (no connection,
 * another answer, no answer within `ms`: this socket's own inactivity timeout, the only wait here).
 */
export function acceptsTls(host: string, port: number, ms = 5000): Promise<boolean | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ host, port })
    const done = (answer: boolean | undefined) => {
      socket.destroy()
      resolve(answer)
    }
    socket.setTimeout(ms, () => done(undefined))
    socket.once('error', () => done(undefined))
    socket.once('close', () => done(undefined))
    socket.once('connect', () => socket.write(SSL_REQUEST))
    socket.once('data', (data) => done(data[0] === 0x53 ? true : data[0] === 0x4e ? false : undefined))
  })
}

/** Where a postgres.js instance connects when it requires TLS; `undefined` without TLS or on a socket path. */
export function tlsTarget(sql: unknown): { host: string; port: number } | undefined {
  const options = (sql as { options?: { ssl?: unknown; host?: unknown; port?: unknown; path?: unknown } })
    .options
  if (!options || !options.ssl || options.ssl === 'prefer' || options.ssl === 'allow' || options.path) {
    return undefined
  }
  const host = Array.isArray(options.host) ? options.host[0] : undefined
  const port = Array.isArray(options.port) ? options.port[0] : undefined
  return typeof host === 'string' && typeof port === 'number' ? { host, port } : undefined
}
