/**
 * URL helpers shared by every backend and by the scheme table (src/schemes.ts): multi-host authorities,
 * the checks every backend URL gets, redaction of passwords for messages, unknown parameters refused, and
 * driver loading. Nothing here names a backend.
 */
import { importDriver, notFoundText } from './drivers.js'
import { parseDuration } from './durations.js'
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

/** One URL parameter of a backend: its type, its default and what it does (for help and the docs). */
export type ParamSpec =
  | { readonly type: 'bool'; readonly default?: boolean; readonly doc: string }
  | { readonly type: 'int'; readonly min?: number; readonly default?: number; readonly doc: string }
  | { readonly type: 'duration'; readonly min?: number; readonly default?: number; readonly doc: string }
  | { readonly type: 'string'; readonly default?: string; readonly doc: string }
  | {
      readonly type: 'enum'
      readonly values: readonly string[]
      readonly default?: string
      readonly doc: string
    }

/** A backend's URL parameters, declared once: `readParams` applies it, each backend's docs page is tested against it. */
export type ParamSchema = Readonly<Record<string, ParamSpec>>

type ValueOf<S extends ParamSpec> = S extends { type: 'bool' }
  ? boolean
  : S extends { type: 'int' | 'duration' }
    ? number
    : string

/** The values of a schema's parameters: a parameter with a default is always there. */
export type Params<T extends ParamSchema> = {
  readonly [K in keyof T]: T[K] extends { default: unknown } ? ValueOf<T[K]> : ValueOf<T[K]> | undefined
}

/**
 * Reads `url`'s query by `schema`: unknown parameters are refused ("did you mean"), each is given at most
 * once, and each value is checked against its type (durations in ms, or '250ms', '15s', …).
 * @throws {TypeError} naming the parameter, the URL (password hidden), what was expected and what came
 */
export function readParams<T extends ParamSchema>(url: URL, schema: T): Params<T> {
  checkParams(url, Object.keys(schema))
  const out: Record<string, unknown> = {}
  for (const [name, spec] of Object.entries(schema)) {
    const values = url.searchParams.getAll(name)
    if (values.length > 1) {
      throw new TypeError(`Expected \`${name}\` once in ${redact(url)}, got it ${values.length} times`)
    }
    const text = values[0]
    if (text === undefined) {
      if (spec.default !== undefined) out[name] = spec.default
      continue
    }
    const bad = (expected: string) =>
      new TypeError(`Expected \`${name}\` in ${redact(url)} to be ${expected}, got ${JSON.stringify(text)}`)
    switch (spec.type) {
      case 'bool':
        // `?fair` alone means true, as in most URL conventions.
        if (text !== 'true' && text !== 'false' && text !== '') throw bad('true or false')
        out[name] = text !== 'false'
        break
      case 'int': {
        const n = Number(text)
        const min = spec.min ?? Number.MIN_SAFE_INTEGER
        if (!/^-?\d+$/.test(text) || !Number.isSafeInteger(n) || n < min) {
          throw bad(spec.min === undefined ? 'an integer' : `an integer of at least ${spec.min}`)
        }
        out[name] = n
        break
      }
      case 'duration':
        out[name] = parseDuration(name, text, spec.min === undefined ? {} : { min: spec.min })
        break
      case 'enum':
        if (!spec.values.includes(text)) throw bad(`one of ${spec.values.join(', ')}`)
        out[name] = text
        break
      case 'string':
        out[name] = text
        break
    }
  }
  return out as Params<T>
}
