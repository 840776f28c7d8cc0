/**
 * How an etcd3 client fails, and what fencelock does about it: the client options it recommends (fault
 * handling, a deadline per call) and the plain words for etcd3's errors.
 *
 * etcd3's default fault handling treats every "recoverable" error as a failing member, and one request's
 * own error is among them: RESOURCE_EXHAUSTED for a message larger than the server accepts. Such an error
 * (1) is sent up to three times, (2) makes etcd3 close every channel to that member (`resetAllServices`,
 * which drops the lease keep-alive and watch streams of every lock on the client), and (3) counts toward
 * a circuit breaker that, after three in a row, refuses every call to the member for 5 s. One oversized
 * key thus failed unrelated acquires and lost an unrelated held lock. With the policies below, only a
 * connection failure is treated as the member's: any other error fails its own call and nothing else.
 */
import type { IOptions } from 'etcd3'
import { jitter } from '../../core/clock.js'
import { causeText } from '../../core/errors.js'

/** The parts of the `etcd3` module the policies need (pass the module itself). */
export type Etcd3Module = Pick<
  typeof import('etcd3'),
  'RecoverableError' | 'GRPCUnavailableError' | 'GRPCDeadlineExceededError'
>

type FaultHandling = NonNullable<IOptions['faultHandling']>
type HostPolicy = ReturnType<NonNullable<FaultHandling['host']>>
type GlobalPolicy = NonNullable<FaultHandling['global']>

/**
 * The deadline of each unary call (streams have none). etcd3 ignores its own `dialTimeout` option: without
 * a deadline, a call to a member that accepts connections but never answers (a partition, a paused
 * process) waits forever, and so would the clean-up of an abandoned acquire that waits for it. 5 s is far
 * above a healthy call (milliseconds) and close to etcd's own request timeout, so etcd's answer about a
 * slow commit usually arrives first.
 */
export const CALL_TIMEOUT_MS = 5000

/** The member each failed call was sent to, for messages (etcd3's errors do not say). */
const memberOf = new WeakMap<object, string>()

/**
 * A failure that belongs to the connection to a member rather than to the request: the member is down,
 * unreachable, has no leader, or the call never got a connection before its deadline. Only these are
 * retried on another member, and only these let etcd3 reset the connection to the member.
 */
function isConnectionFailure(etcd3: Etcd3Module, error: unknown): boolean {
  if (error instanceof etcd3.GRPCUnavailableError) return true
  // "Waiting for LB pick": no connection was ever made within the deadline.
  return error instanceof etcd3.GRPCDeadlineExceededError && /LB pick/i.test(error.message)
}

/**
 * The longest wait before reconnecting a broken watch stream. etcd3's default backs off to 30 s: a waiter's
 * wake-up and a holder's loss watch would then resume up to 30 s after etcd came back, and the pending
 * timer kept a process whose client was closed during an outage alive that long (measured: 29 s).
 */
const WATCH_RECONNECT_MAX_MS = 1000

type WatchBackoff = NonNullable<FaultHandling['watchBackoff']>

/**
 * Reconnection delays of the watch stream: 100 ms doubling up to WATCH_RECONNECT_MAX_MS, jittered (the
 * core's `jitter`). Here, not in the core: it is etcd3's own retry of its stream, configured in its shape.
 */
function watchBackoff(attempt: number): WatchBackoff {
  const backoff = {
    duration: attempt < 0 ? 0 : jitter(Math.min(WATCH_RECONNECT_MAX_MS, 100 * 2 ** attempt)),
    next: () => watchBackoff(attempt + 1),
  }
  return backoff as WatchBackoff
}

/** etcd3 only calls `execute`; the events are cockatiel's, for its own policies. */
const noEvent = () => ({ dispose() {} })

/** The context etcd3's calls get (they ignore it): one signal that never aborts, not one per call. */
const CONTEXT = { signal: new AbortController().signal }

/**
 * The policy guarding each member: no circuit breaker. A connection failure passes through as etcd3
 * expects (recoverable: another member may be tried, and the member's channels are reset). Any other error
 * loses etcd3's "recoverable" mark, so that it is neither retried nor allowed to close the member's
 * channels: it fails its own call only. (A breaker that counted only connection failures would save little:
 * a refused connection fails in a millisecond, and a silent member is bounded by the call deadline.)
 */
function memberPolicy(etcd3: Etcd3Module, member: string): HostPolicy {
  const policy = {
    onSuccess: noEvent,
    onFailure: noEvent,
    async execute<T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T) {
      try {
        return await fn(CONTEXT)
      } catch (error) {
        if (typeof error !== 'object' || error === null) throw error
        memberOf.set(error, member)
        if (!isConnectionFailure(etcd3, error) && etcd3.RecoverableError in error) {
          // The mark is an own property of this error object, made for this call alone.
          delete (error as Record<symbol, unknown>)[etcd3.RecoverableError]
        }
        throw error
      }
    },
  }
  return policy as unknown as HostPolicy
}

/**
 * The policy around each call: a connection failure is retried at once on the next member (etcd3 picks
 * another each time), once per member. Nothing else is retried here: the core retries, with backoff.
 * Retrying our requests is safe: each is idempotent (conditional on our key's create revision, or a
 * delete by our unique name).
 */
function callPolicy(etcd3: Etcd3Module, members: number): GlobalPolicy {
  const policy = {
    onSuccess: noEvent,
    onFailure: noEvent,
    async execute<T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T) {
      for (let attempt = 1; ; attempt++) {
        try {
          return await fn(CONTEXT)
        } catch (error) {
          if (attempt >= members || !isConnectionFailure(etcd3, error)) throw error
        }
      }
    },
  }
  return policy as unknown as GlobalPolicy
}

/**
 * Options for an `Etcd3` client as fencelock recommends them: a request's own error (an oversized key, a
 * permission) fails that request only, instead of closing the member's channels and tripping etcd3's
 * circuit breaker for every lock on the client; each unary call has a deadline; a broken watch stream is
 * reopened within a second. Anything you set in `options` (your own `faultHandling` policies,
 * `defaultCallOptions`) wins.
 * @param etcd3 the `etcd3` module itself (`import * as etcd3 from 'etcd3'`)
 * @example
 * import * as etcd3 from 'etcd3'
 * const client = new etcd3.Etcd3(etcdClientOptions(etcd3, { hosts: ['http://10.0.0.1:2379'] }))
 * const locks = createLockClient(etcdBackend({ client }))
 */
export function etcdClientOptions(etcd3: Etcd3Module, options: IOptions): IOptions {
  const members = typeof options.hosts === 'string' ? 1 : Math.max(1, options.hosts.length)
  return {
    ...options,
    faultHandling: {
      host: (member) => memberPolicy(etcd3, member.replace(/^https?:\/\//, '')),
      global: callPolicy(etcd3, members),
      watchBackoff: watchBackoff(-1),
      // Only the policies you set: `{ host: undefined }` keeps ours rather than leave none.
      ...Object.fromEntries(Object.entries(options.faultHandling ?? {}).filter(([, v]) => v !== undefined)),
    },
    defaultCallOptions:
      options.defaultCallOptions ??
      ((context) => (context.isStream ? {} : { deadline: Date.now() + CALL_TIMEOUT_MS })),
  }
}

/** What a failure means, in plain words, and whether waiting could help. */
export interface Failure {
  readonly text: string
  readonly retryable: boolean
}

/** Messages of etcd's own errors (etcdserver: …), in plain words. */
const ETCD_ERRORS: ReadonlyArray<readonly [RegExp, string, boolean]> = [
  [/etcdserver: no leader/, 'etcd has no leader (an election is under way, or most members are down)', true],
  [/etcdserver: leader changed/, 'the etcd leader changed during the request', true],
  [
    /etcdserver: request timed out/,
    'etcd did not commit the request in time (slow disks, or most members unreachable)',
    true,
  ],
  [/etcdserver: too many requests/, 'etcd is overloaded (too many requests)', true],
  [
    /etcdserver: too many operations in txn request/,
    "the transaction has more operations than etcd's --max-txn-ops allows (128 by default; an atomic set " +
      'puts one per key): split the set into atomic sets of fewer keys taken in a fixed order, or raise ' +
      '--max-txn-ops on every member',
    false,
  ],
  [
    /etcdserver: request is too large/,
    "the request is larger than etcd's --max-request-bytes allows (use a shorter key)",
    false,
  ],
  [
    /database space exceeded/,
    "etcd's database is full (NOSPACE alarm): compact and defragment it, then disarm the alarm",
    false,
  ],
  [/etcdserver: permission denied/, "etcd denied permission (check the user's role on the prefix)", false],
  [/authentication failed/, 'etcd rejected the user name or password', false],
  [/but the client was already closed/, 'the etcd3 client was closed', false],
  [
    /circuit breaker is open/,
    "etcd3's circuit breaker is open after repeated failures, so nothing was sent (etcd3's default fault " +
      'handling: build the client with etcdClientOptions() to keep one request from blocking the others)',
    true,
  ],
]

/** etcd3's (and gRPC's) error in plain words: "connection refused at 10.0.0.1:2379", "timed out after 5000 ms". */
export function describeFailure(error: unknown): Failure {
  const message = String((error as Error)?.message ?? error)
  const member = typeof error === 'object' && error !== null ? memberOf.get(error) : undefined
  const at = member ? ` at ${member}` : ''
  for (const [pattern, text, retryable] of ETCD_ERRORS) {
    if (pattern.test(message)) return { text, retryable }
  }
  const refused = /ECONNREFUSED (\S+?)\.?(?:\s|$)/.exec(message)
  if (refused)
    return { text: `connection refused at ${refused[1]} (is etcd running there?)`, retryable: true }
  const unreachable = /(EHOSTUNREACH|ENETUNREACH|ETIMEDOUT) (\S+?)\.?(?:\s|$)/.exec(message)
  if (unreachable) {
    const what = unreachable[1] === 'ETIMEDOUT' ? 'connecting timed out' : 'no route to the host'
    return { text: `${what} at ${unreachable[2]}`, retryable: true }
  }
  if (/ENOTFOUND|Name resolution failed/.test(message)) {
    const target = /for target (?:dns:)?(\S+)/.exec(message)?.[1] ?? /ENOTFOUND (\S+)/.exec(message)?.[1]
    return { text: `cannot resolve the host name${target ? ` ${target}` : ''}`, retryable: true }
  }
  if (/ECONNRESET|Connection dropped/.test(message)) {
    return { text: `the connection${at} was dropped`, retryable: true }
  }
  const deadline = /Deadline exceeded after ([\d.]+)s/.exec(message)
  if (deadline) {
    const ms = Math.round(Number(deadline[1]) * 1000)
    const why = /LB pick/i.test(message) ? 'no connection could be made' : 'no reply'
    return { text: `timed out after ${ms} ms${at} (${why})`, retryable: true }
  }
  const size = /message larger than max \((\d+) vs\. (\d+)\)/.exec(message)
  if (size) {
    return {
      text: `the request (${size[1]} bytes) is larger than etcd accepts (${size[2]} bytes; use a shorter key)`,
      retryable: false,
    }
  }
  // gRPC appends an empty "Resolution note:" and the code's name; neither helps a reader.
  const text = message
    .replace(/\.?\s*Resolution note:.*$/s, '')
    .replace(/^\d+ [A-Z_]+: /, '')
    .replace(/^No connection established\. Last error: (?:Error: )?/, 'could not connect: ')
  return { text: `${causeText(text)}${at}`, retryable: true }
}
