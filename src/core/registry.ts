import type { LockBackend } from './backend.js'
import { importDriver, notFoundText } from './drivers.js'
import { causeText, DriverMissingError } from './errors.js'

interface BackendModule {
  fromUrl(url: URL): LockBackend | Promise<LockBackend>
}

/** One URL scheme: the module that serves it, and what help and error messages say of it. */
export interface BackendScheme {
  /** Loads the module lazily, so a backend's driver (an optional peer dependency) is needed only by its users. */
  readonly load: () => Promise<BackendModule>
  /** A URL of this scheme, as help and messages show it. */
  readonly example: string
  /** What the backend is, in a few words. */
  readonly summary: string
}

/** Every scheme this build understands: the one table that loading, help and messages all read. */
const SCHEMES: Readonly<Record<string, BackendScheme>> = {
  'memory:': {
    load: () => import('../backends/memory/index.js'),
    example: 'memory:tests',
    summary: 'in this process only (tests)',
  },
  'file:': {
    load: () => import('../backends/file/index.js'),
    example: 'file:///var/lock/app',
    summary: 'a folder of lock files, shared by the processes of one host',
  },
  'redis:': {
    load: () => import('../backends/redis/index.js'),
    example: 'redis://host:6379',
    summary: 'one Redis primary, or a Redis Cluster with ?cluster=true',
  },
  'rediss:': {
    load: () => import('../backends/redis/index.js'),
    example: 'rediss://user:password@host:6380',
    summary: 'the same over TLS',
  },
  'redlock:': {
    load: () => import('../backends/redlock/index.js'),
    example: 'redlock://h1:6379,h2:6379,h3:6379',
    summary: 'a majority of independent Redis masters',
  },
  'etcd:': {
    load: () => import('../backends/etcd/index.js'),
    example: 'etcd://h1:2379,h2:2379',
    summary: "etcd v3's lock recipe",
  },
}

/**
 * Schemes whose authority lists several servers (`redlock://h1:p1,h2:p2`). The WHATWG URL parser rejects
 * a comma-separated host list, so the URL keeps the first host and the whole list is kept beside it.
 */
const MULTI_HOST = new Set(['redlock:', 'etcd:'])
const hostLists = new WeakMap<URL, readonly string[]>()

/** The `host:port` entries of a URL's authority: several for multi-host schemes, else its one host. */
export function hostsOf(url: URL): readonly string[] {
  return hostLists.get(url) ?? [url.host]
}

function parseMultiHost(input: string): URL | undefined {
  const match = /^([a-z][a-z0-9+.-]*:)\/\/([^/?#]*)(.*)$/i.exec(input)
  if (!match || !MULTI_HOST.has(match[1]!.toLowerCase())) return undefined
  const [, scheme, authority, rest] = match as unknown as [string, string, string, string]
  const at = authority.lastIndexOf('@')
  const userinfo = at >= 0 ? authority.slice(0, at + 1) : ''
  const hosts = authority
    .slice(at + 1)
    .split(',')
    .map((h) => h.trim())
  if (hosts.some((h) => h === '')) return undefined
  const url = new URL(`${scheme}//${userinfo}${hosts[0]}${rest}`)
  // Each entry must parse as a host[:port] on its own.
  for (const h of hosts) new URL(`${scheme}//${h}`)
  hostLists.set(url, hosts)
  return url
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
    url = input instanceof URL ? input : (parseMultiHost(text) ?? new URL(input))
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
  // A password with a reserved character ('/', '?', '#') ends the authority early: the URL then parses
  // with the rest of the password in its path or query, and every later message would quote it.
  if (
    !LOCAL.has(url.protocol) &&
    !url.username &&
    !url.password &&
    /^[^:]+:\/\/[^@]*[/?#][^@]*@/.test(text)
  ) {
    throw new TypeError(
      `The backend URL ${JSON.stringify(hideUserinfo(text))} has an "@" after its host: if it holds a user and ` +
        'password, percent-encode the reserved characters in them (/ as %2F, ? as %3F, # as %23, @ as %40)',
    )
  }
  for (const [part, value] of [
    ['user', url.username],
    ['password', url.password],
    ['path', url.pathname],
  ] as const) {
    try {
      decodeURIComponent(value)
    } catch {
      const shown = part === 'password' ? '***' : JSON.stringify(value)
      throw new TypeError(
        `Malformed percent-escape in the ${part} of the backend URL ${redact(url)} (${shown}): write "%" as %25`,
      )
    }
  }
  if (url.protocol === 'memory:' && url.host !== '') {
    throw new TypeError(
      `Expected memory: or memory:NAME, got ${redact(url)}: the name goes right after the colon (memory:${url.host}), ` +
        'not after "//"',
    )
  }
  return url
}

/** Schemes without a server: their URLs carry no user or password. */
const LOCAL = new Set(['memory:', 'file:'])

/** The text of a URL with everything between "//" and its last "@" hidden (it may hold a password). */
export function hideUserinfo(text: string): string {
  const at = text.lastIndexOf('@')
  const start = text.indexOf('//')
  return start >= 0 && at > start ? `${text.slice(0, start + 2)}***${text.slice(at)}` : text
}

export async function loadBackend(url: URL): Promise<LockBackend> {
  const scheme = SCHEMES[url.protocol]
  if (!scheme) throw new TypeError(`Unknown lock backend scheme "${url.protocol}"`)
  const module = await scheme.load()
  return module.fromUrl(url)
}

/** The URL without its password, for messages and backend ids. */
export function redact(url: URL): string {
  let href = url.href
  if (url.password) {
    const copy = new URL(url.href)
    copy.password = '***'
    href = copy.href
  }
  const hosts = hostLists.get(url)
  // Show every server of a multi-host URL, not just the first one the URL object kept.
  return hosts ? href.replace(/^([^:]+:\/\/(?:[^@/?#]*@)?)[^/?#]*/, `$1${hosts.join(',')}`) : href
}

/**
 * Loads a backend's driver (an optional peer dependency), or fails with one line saying what to install
 * and, when it was searched for beyond fencelock's own location, where (see drivers.ts).
 * `load` is the backend's own `import('…')`, kept literal where bundlers can see it.
 */
export function loadDriver<T>(pkg: string, backend: string, url: URL, load: () => Promise<T>): Promise<T> {
  return importDriver(pkg, load).catch((cause: unknown) => {
    const missing = notFoundText(pkg, cause)
    throw new DriverMissingError(
      pkg,
      missing === undefined
        ? `The ${backend} backend needs the ${pkg} package, which failed to load: ${causeText(cause)}`
        : `The ${backend} backend needs the ${pkg} package, which ${missing}`,
      { backend: redact(url), cause },
    )
  })
}

/** Refuses a URL parameter the backend does not know, naming the ones it does. */
export function checkParams(url: URL, known: readonly string[]): void {
  for (const name of url.searchParams.keys()) {
    if (!known.includes(name)) {
      throw new TypeError(
        `Unknown parameter "${name}" in ${redact(url)}; ${known.length ? `known: ${known.join(', ')}` : 'it takes none'}`,
      )
    }
  }
}
