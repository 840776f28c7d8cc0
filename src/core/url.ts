/**
 * URL helpers shared by every backend and by the scheme table (src/schemes.ts): multi-host authorities,
 * the checks every backend URL gets, redaction of passwords for messages, unknown parameters refused, and
 * driver loading. Nothing here names a backend.
 */
import { importDriver, notFoundText } from './drivers.js'
import { causeText, DriverMissingError } from './errors.js'
import { suggest } from './options.js'

/**
 * Multi-host URLs (`redlock://h1:p1,h2:p2`): the WHATWG URL parser rejects a comma-separated host list,
 * so the URL keeps the first host and the whole list is kept beside it.
 */
const hostLists = new WeakMap<URL, readonly string[]>()

/** The `host:port` entries of a URL's authority: several for multi-host schemes, else its one host. */
export function hostsOf(url: URL): readonly string[] {
  return hostLists.get(url) ?? [url.host]
}

/** Parses a URL whose authority may list several `host:port` entries; undefined when it is not one. */
export function parseMultiHost(input: string, multiHost: (scheme: string) => boolean): URL | undefined {
  const match = /^([a-z][a-z0-9+.-]*:)\/\/([^/?#]*)(.*)$/i.exec(input)
  if (!match || !multiHost(match[1]!.toLowerCase())) return undefined
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

/**
 * The checks every backend URL gets after parsing: no half-parsed password, no malformed percent-escape.
 * `local`: a scheme without a server (its URL carries no user or password).
 * @throws {TypeError} naming the URL (password hidden) and what to fix
 */
export function checkUrl(url: URL, text: string, local: boolean): void {
  // A password with a reserved character ('/', '?', '#') ends the authority early: the URL then parses
  // with the rest of the password in its path or query, and every later message would quote it.
  if (!local && !url.username && !url.password && /^[^:]+:\/\/[^@]*[/?#][^@]*@/.test(text)) {
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
}

/** The text of a URL with everything between "//" and its last "@" hidden (it may hold a password). */
export function hideUserinfo(text: string): string {
  const at = text.lastIndexOf('@')
  const start = text.indexOf('//')
  return start >= 0 && at > start ? `${text.slice(0, start + 2)}***${text.slice(at)}` : text
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

/** Refuses a URL parameter the backend does not know, naming the closest known one and all of them. */
export function checkParams(url: URL, known: readonly string[]): void {
  for (const name of url.searchParams.keys()) {
    if (!known.includes(name)) {
      const guess = suggest(name, known)
      throw new TypeError(
        `Unknown parameter "${name}" in ${redact(url)}${guess ? `; did you mean "${guess}"?` : ''}` +
          `${known.length ? ` Known: ${known.join(', ')}` : '; it takes none'}`,
      )
    }
  }
}
