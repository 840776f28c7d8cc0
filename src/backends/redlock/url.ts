/**
 * The redlock:// URL: its parameters and its node list (each node's client comes from redis/connect.ts).
 * `redlock://[user:password@]host1:port1,host2:port2,host3:port3[?prefix=app:&nodeTimeout=50ms&restartDelay=30s]`
 */
import { hostsOf, type ParamSchema, redact } from '../../core/url.js'

/** The URL parameters of redlock:// (its page in docs/backends/ is tested against this). */
export const PARAMS = {
  prefix: { type: 'string', doc: 'prefix of every key on every node (default fencelock:)' },
  nodeTimeout: {
    type: 'duration',
    min: 1,
    doc: "how long one node's reply may take before it counts as failed",
  },
  restartDelay: {
    type: 'duration',
    min: 0,
    doc: 'how long a restarted node sits out before it votes again (default: the longest ttl in use)',
  },
} as const satisfies ParamSchema

/** The URL's nodes, `host:port` each; refuses a database path and a node listed twice. */
export function nodeHosts(url: URL): readonly string[] {
  if (url.pathname !== '' && url.pathname !== '/') {
    throw new TypeError(
      `Expected no path in ${redact(url)}: Redlock uses database 0 on every node; use ?prefix= to keep applications apart`,
    )
  }
  const hosts = hostsOf(url)
  if (new Set(hosts).size !== hosts.length) {
    throw new TypeError(
      `Expected distinct nodes in ${redact(url)}: a node listed twice would count twice toward a majority`,
    )
  }
  return hosts
}
