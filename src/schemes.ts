/**
 * Every URL scheme this build understands, and the backend module that serves it: the one file that names
 * every backend (the core names none). Loading, the CLI's help and error messages all read this table.
 * Adding a backend: one entry here (and its subpath in package.json's exports).
 */
import type { LockBackend } from './core/backend.js'
import { checkUrl, hideUserinfo, type ParamSchema, parseMultiHost, redact } from './core/url.js'

interface BackendModule {
  fromUrl(url: URL): LockBackend | Promise<LockBackend>
  /** Its URL parameters, which `fromUrl` reads with `readParams`. */
  readonly PARAMS: ParamSchema
}

/** One URL scheme: the module that serves it, and what help and error messages say of it. */
export interface BackendScheme {
  /** Loads the module lazily, so a backend's driver (an optional peer dependency) is needed only by its users. */
  readonly load: () => Promise<BackendModule>
  /** A URL of this scheme, as help and messages show it. */
  readonly example: string
  /** What the backend is, in a few words. */
  readonly summary: string
  /** Its authority may list several servers (`h1:p1,h2:p2`): see `hostsOf`. */
  readonly multiHost?: boolean
  /** It has no server: its URL carries no user or password. */
  readonly local?: boolean
}

/** Every scheme this build understands: the one table that loading, help and messages all read. */
const SCHEMES: Readonly<Record<string, BackendScheme>> = {
  'memory:': {
    load: () => import('./backends/memory/index.js'),
    example: 'memory:tests',
    summary: 'in this process only (tests)',
    local: true,
  },
  'file:': {
    load: () => import('./backends/file/index.js'),
    example: 'file:///var/lock/app',
    summary: 'a folder of lock files, shared by the processes of one host',
    local: true,
  },
  'redis:': {
    load: () => import('./backends/redis/index.js'),
    example: 'redis://host:6379',
    summary: 'one Redis primary, or a Redis Cluster with ?cluster=true',
  },
  'rediss:': {
    load: () => import('./backends/redis/index.js'),
    example: 'rediss://user:password@host:6380',
    summary: 'the same over TLS',
  },
  'redlock:': {
    load: () => import('./backends/redlock/index.js'),
    example: 'redlock://h1:6379,h2:6379,h3:6379',
    summary: 'a majority of independent Redis masters',
    multiHost: true,
  },
  'etcd:': {
    load: () => import('./backends/etcd/index.js'),
    example: 'etcd://h1:2379,h2:2379',
    summary: "etcd v3's lock recipe",
    multiHost: true,
  },
  'zookeeper:': {
    load: () => import('./backends/zookeeper/index.js'),
    example: 'zookeeper://h1:2181,h2:2181,h3:2181/locks',
    summary: "Apache Curator's InterProcessMutex recipe (interoperable with it)",
    multiHost: true,
  },
  's3:': {
    load: () => import('./backends/s3/index.js'),
    example: 's3://bucket/prefix?region=eu-west-1',
    summary: 'an S3 bucket (or a compatible store that enforces conditional writes)',
  },
  'gs:': {
    load: () => import('./backends/gcs/index.js'),
    example: 'gs://bucket/prefix',
    summary: 'a Google Cloud Storage bucket',
  },
  'dynamodb:': {
    load: () => import('./backends/dynamodb/index.js'),
    example: 'dynamodb://locks?region=eu-west-1',
    summary: 'one item per lock in a DynamoDB table, written by conditional PutItems',
  },
}

/** The schemes this build understands, for messages. */
export const supportedSchemes = (): string[] => Object.keys(SCHEMES)

/** The schemes this build understands, with their examples and summaries, for help. */
export const backendSchemes = (): ReadonlyArray<readonly [scheme: string, BackendScheme]> =>
  Object.entries(SCHEMES)

/**
 * Parses and checks a backend URL.
 * @throws {TypeError} naming the URL and what to fix
 */
export function parseBackendUrl(input: string | URL): URL {
  let url: URL
  const text = String(input)
  try {
    url =
      input instanceof URL
        ? input
        : (parseMultiHost(text, (scheme) => SCHEMES[scheme]?.multiHost === true) ?? new URL(input))
  } catch {
    // Never echo a password, even from a URL too broken to parse (the parser's own error quotes it whole).
    throw new TypeError(
      `Expected a backend URL such as file:///var/lock/app or memory:, got ${JSON.stringify(hideUserinfo(text))}`,
    )
  }
  if (!(url.protocol in SCHEMES)) {
    throw new TypeError(
      `Unknown lock backend scheme "${url.protocol}" in ${redact(url)}; supported: ${supportedSchemes().join(', ')}`,
    )
  }
  checkUrl(url, text, SCHEMES[url.protocol]?.local === true)
  if (url.protocol === 'memory:' && url.host !== '') {
    throw new TypeError(
      `Expected memory: or memory:NAME, got ${redact(url)}: the name goes right after the colon (memory:${url.host}), ` +
        'not after "//"',
    )
  }
  return url
}

export async function loadBackend(url: URL): Promise<LockBackend> {
  const scheme = SCHEMES[url.protocol]
  if (!scheme) throw new TypeError(`Unknown lock backend scheme "${url.protocol}"`)
  const module = await scheme.load()
  return module.fromUrl(url)
}
