/**
 * `createLockClient`: the library's front door. It turns a URL into a backend through the scheme table
 * (src/schemes.ts), then hands it to the core, which knows no backend.
 */
import type { LockBackend } from './core/backend.js'
import { clientOver, type LockClient } from './core/client.js'
import type { ClientOptions } from './core/options.js'
import { loadBackend, parseBackendUrl } from './schemes.js'

/**
 * Creates a lock client.
 * @param urlOrBackend a URL (`file:///var/lock/app`, `memory:`, `redis://…`) or a backend built in code
 * @example
 * const locks = createLockClient('file:///tmp/locks', { ttl: '15s' })
 * await locks.withLock('reports:nightly', async (lock) => {
 *   console.log(`writing the report with fence ${lock.fence}`)
 * })
 * @throws {TypeError} for a malformed URL, an unknown scheme or a bad option
 */
export function createLockClient(
  urlOrBackend: string | URL | LockBackend,
  options?: ClientOptions,
): LockClient {
  if (typeof urlOrBackend === 'string' || urlOrBackend instanceof URL) {
    const url = parseBackendUrl(urlOrBackend)
    return clientOver(() => loadBackend(url), options)
  }
  return clientOver(urlOrBackend, options)
}
