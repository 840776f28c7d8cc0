import type { LockBackend } from './backend.js'
import { DriverMissingError } from './errors.js'

/**
 * URL schemes and the module that serves each. Modules load lazily, so a backend's driver (an optional
 * peer dependency) is needed only by those who use it.
 */
interface BackendModule {
  fromUrl(url: URL): LockBackend | Promise<LockBackend>
}

const SCHEMES: Record<string, () => Promise<BackendModule>> = {
  'memory:': () => import('../backends/memory/index.js'),
  'file:': () => import('../backends/file/index.js'),
  'redis:': () => import('../backends/redis/index.js'),
  'rediss:': () => import('../backends/redis/index.js'),
  'redlock:': () => import('../backends/redlock/index.js'),
  'etcd:': () => import('../backends/etcd/index.js'),
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
function hideUserinfo(text: string): string {
  const at = text.lastIndexOf('@')
  const start = text.indexOf('//')
  return start >= 0 && at > start ? `${text.slice(0, start + 2)}***${text.slice(at)}` : text
}

export async function loadBackend(url: URL): Promise<LockBackend> {
  const load = SCHEMES[url.protocol]
  if (!load) throw new TypeError(`Unknown lock backend scheme "${url.protocol}"`)
  const module = await load()
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
 * Loads a backend's driver (an optional peer dependency), or fails with one line saying what to install.
 * `load` is the backend's own `import('…')`, kept literal where bundlers can see it.
 */
export function loadDriver<T>(pkg: string, backend: string, url: URL, load: () => Promise<T>): Promise<T> {
  return load().catch((cause: unknown) => {
    throw new DriverMissingError(
      pkg,
      `The ${backend} backend needs the ${pkg} package, which is not installed: npm install ${pkg}`,
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
