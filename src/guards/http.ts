/**
 * The fence guard for an HTTP resource (`fencelock/guards/http`). The convention: the lock holder sends
 * its fence in the `Fencing-Token` request header (decimal digits); the server remembers the greatest
 * token it has admitted per resource and refuses an older one with 412 Precondition Failed, a missing
 * one with 428 Precondition Required, a malformed one with 400.
 *
 * - 412, not 409: the token is a precondition the client put in a header, evaluated false (RFC 9110
 *   §15.5.13), like `If-Match`; 409 asks the client to resolve a conflict and resubmit, and a stale
 *   holder must not resubmit anything. 428 (RFC 6585) is the status for a request that must be
 *   conditional to prevent lost updates and is not.
 * - The resource comes from the request through the user's `resource` function; `undefined` leaves a
 *   request unguarded (reads, health checks).
 * - One request per resource at a time in this process: a request is admitted, then its handler runs to
 *   the end (the response closed, for Node's `http`; the returned Response, for fetch handlers) before
 *   the next request for that resource is admitted. Otherwise an admitted request whose write is slow
 *   could land after a newer holder's, which the token check alone cannot see. Only the holder of the
 *   lock should be writing, so this costs nothing when all is well; a client that stalls mid-request
 *   holds the resource until the server's request timeout ends it.
 * - The last-seen store is pluggable (fence-store.ts): the memory default is one process's. Behind a load
 *   balancer use a shared store (`redisFenceStore`); the one-at-a-time rule is then per instance, so
 *   also guard the write the handler makes (a SQL or Redis guard with the same token) to exclude the
 *   slow-write race across instances.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { type FenceStore, memoryFenceStore } from './fence-store.js'
import { MAX_FENCE } from './fence-value.js'

export { type FenceStore, memoryFenceStore } from './fence-store.js'

/** The request header that carries the lock's fence: `Fencing-Token: 4711`. */
export const FENCING_TOKEN_HEADER = 'Fencing-Token'

/** Options of the HTTP guards. */
export interface HttpGuardOptions<Req> {
  /** The resource a request writes, e.g. its path; `undefined` lets the request through unchecked. */
  readonly resource: (request: Req) => string | undefined
  /** Where the last admitted token of each resource is kept. @default memoryFenceStore() */
  readonly store?: FenceStore | undefined
  /** The header carrying the token. @default 'Fencing-Token' */
  readonly header?: string | undefined
}

/** A refusal: the status and the text the guard answers with. */
interface Refusal {
  readonly status: 400 | 412 | 428 | 503
  readonly message: string
}

/** The guard shared by both adapters: admits a request and runs its handler in the resource's turn. */
class FenceGuard<Req> {
  readonly #resource: (request: Req) => string | undefined
  readonly #store: FenceStore
  readonly #header: string
  /** Per resource, the end of the last turn given out; deleted when no turn follows it. */
  readonly #turns = new Map<string, Promise<void>>()

  constructor(options: HttpGuardOptions<Req>) {
    if (typeof options?.resource !== 'function')
      throw new TypeError('Expected `resource` to be a function from a request to its resource key')
    this.#resource = options.resource
    this.#store = options.store ?? memoryFenceStore()
    this.#header = options.header ?? FENCING_TOKEN_HEADER
  }

  /**
   * Runs `handle` in `request`'s turn after admitting its token, or answers `refuse` without running
   * it. `handle` resolves when the request is done with the resource.
   */
  async run<T>(
    request: Req,
    token: (name: string) => string | null | undefined,
    handle: () => Promise<T>,
    refuse: (refusal: Refusal) => T,
  ): Promise<T> {
    const resource = this.#resource(request)
    if (resource === undefined) return handle()
    const header = token(this.#header)
    if (header === null || header === undefined || header === '')
      return refuse({ status: 428, message: `${resource} takes writes only with a ${this.#header} header` })
    const fence = /^\d{1,19}$/.test(header) ? BigInt(header) : undefined
    if (fence === undefined || fence > MAX_FENCE)
      return refuse({
        status: 400,
        message: `${this.#header} must be a lock's fence (decimal digits), got ${header}`,
      })
    const previous = this.#turns.get(resource) ?? Promise.resolve()
    let done!: () => void
    const turn = new Promise<void>((resolve) => {
      done = resolve
    })
    const end = previous.then(() => turn)
    this.#turns.set(resource, end)
    try {
      await previous
      let latest: bigint
      try {
        latest = await this.#store.advance(resource, fence)
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error)
        return refuse({
          status: 503,
          message: `the fence store of ${resource} failed (${reason}); retry later`,
        })
      }
      if (latest !== fence)
        return refuse({
          status: 412,
          message: `${this.#header} ${fence} of ${resource} is older than ${latest}: a later lock holder has written`,
        })
      return await handle()
    } finally {
      done()
      if (this.#turns.get(resource) === end) this.#turns.delete(resource)
    }
  }
}

/**
 * Wraps a Node `http` request listener (or a Connect/Express middleware: extra arguments pass through)
 * so that a request for a guarded resource runs only with a `Fencing-Token` not older than the last one
 * admitted for it; others get 412, 428 or 400 (see the file's header) and never reach `listener`.
 * @example
 * import { createServer } from 'node:http'
 * const server = createServer(
 *   guardHttpListener({ resource: (req) => (req.method === 'GET' ? undefined : req.url) }, (req, res) => {
 *     // …write the resource…
 *     res.end('written')
 *   }),
 * )
 * // the holder: fetch(url, { method: 'PUT', headers: { 'Fencing-Token': String(lock.fence) }, body })
 */
export function guardHttpListener<
  Req extends IncomingMessage,
  Res extends ServerResponse,
  Rest extends unknown[] = [],
>(
  options: HttpGuardOptions<Req>,
  listener: (request: Req, response: Res, ...rest: Rest) => unknown,
): (request: Req, response: Res, ...rest: Rest) => Promise<void> {
  const guard = new FenceGuard(options)
  return (request, response, ...rest) =>
    guard.run(
      request,
      (name) => {
        const value = request.headers[name.toLowerCase()]
        return Array.isArray(value) ? value.join(',') : value
      },
      async () => {
        // The turn lasts until the response is over (answered, or its connection gone), however the
        // listener answers: before returning, in a callback later, or from a promise.
        const closed = new Promise<void>((resolve) => {
          if (response.closed) resolve()
          else response.once('close', () => resolve())
        })
        await listener(request, response, ...rest)
        await closed
      },
      ({ status, message }) => {
        response.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' }).end(`${message}\n`)
      },
    )
}

/**
 * Wraps a fetch-style handler (`Request` → `Response`: Deno, Bun, Hono, Next.js route handlers…) so that
 * a request for a guarded resource runs only with a `Fencing-Token` not older than the last one admitted
 * for it; others get 412, 428 or 400 (see the file's header). The resource's turn ends when the handler's
 * Response is returned: finish the write before returning it.
 * @example
 * const handler = guardFetchHandler({ resource: (req) => new URL(req.url).pathname }, async (req) => {
 *   // …write the resource…
 *   return new Response('written')
 * })
 */
export function guardFetchHandler<Req extends Request, Rest extends unknown[] = []>(
  options: HttpGuardOptions<Req>,
  handler: (request: Req, ...rest: Rest) => Response | Promise<Response>,
): (request: Req, ...rest: Rest) => Promise<Response> {
  const guard = new FenceGuard(options)
  return (request, ...rest) =>
    guard.run(
      request,
      (name) => request.headers.get(name),
      async () => handler(request, ...rest),
      ({ status, message }) =>
        new Response(`${message}\n`, { status, headers: { 'content-type': 'text/plain; charset=utf-8' } }),
    )
}
