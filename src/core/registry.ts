import type { LockBackend } from './backend.js'

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
}

/** The schemes this build understands, for messages. */
export const supportedSchemes = (): string[] => Object.keys(SCHEMES)

/**
 * Parses and checks a backend URL.
 * @throws {TypeError} naming the URL and what to fix
 */
export function parseBackendUrl(input: string | URL): URL {
  let url: URL
  try {
    url = input instanceof URL ? input : new URL(input)
  } catch {
    // Never echo a password, even from a URL too broken to parse (the parser's own error quotes it whole).
    const shown = String(input).replace(/\/\/([^/@:]*):[^@/]*@/, '//$1:***@')
    throw new TypeError(
      `Expected a backend URL such as file:///var/lock/app or memory:, got ${JSON.stringify(shown)}`,
    )
  }
  if (!(url.protocol in SCHEMES)) {
    throw new TypeError(
      `Unknown lock backend scheme "${url.protocol}" in ${redact(url)}; supported: ${supportedSchemes().join(', ')}`,
    )
  }
  return url
}

export async function loadBackend(url: URL): Promise<LockBackend> {
  const load = SCHEMES[url.protocol]
  if (!load) throw new TypeError(`Unknown lock backend scheme "${url.protocol}"`)
  const module = await load()
  return module.fromUrl(url)
}

/** The URL without its password, for messages and backend ids. */
export function redact(url: URL): string {
  if (!url.password) return url.href
  const copy = new URL(url.href)
  copy.password = '***'
  return copy.href
}
