import type { LockBackend } from '../core/backend.js'
import { createLockClient, type LockClient } from '../core/client.js'
import { parseDuration } from '../core/durations.js'
import { loadBackend, parseBackendUrl } from '../core/registry.js'
import { type ParsedOptions, resolveUrl } from './args.js'

export interface Opened {
  readonly backend: LockBackend
  readonly client: LockClient
  close(): Promise<void>
}

/** Opens the backend eagerly, so a bad URL or a missing driver fails before anything else happens. */
export async function open(values: ParsedOptions): Promise<Opened> {
  const url = parseBackendUrl(resolveUrl(values))
  const ttl = values.ttl === undefined ? undefined : parseDuration('--ttl', values.ttl, { min: 10 })
  const backend = await loadBackend(url)
  const client = createLockClient(backend, ttl === undefined ? {} : { ttl })
  return {
    backend,
    client,
    async close() {
      await client.close()
      await backend.close()
    },
  }
}

export function timeoutOf(values: ParsedOptions): number | undefined {
  if (values.timeout === undefined) return undefined
  return parseDuration('--timeout', values.timeout, { allowInfinity: true })
}

const jsonSafe = (_key: string, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)

/** One JSON line on stdout; bigints (fences) as decimal strings. */
export function printJson(value: object): void {
  process.stdout.write(`${JSON.stringify(value, jsonSafe)}\n`)
}

/**
 * While an acquire waits: on a TTY, one status line on stderr kept up to date (key, holder, fence,
 * elapsed); with --verbose elsewhere, one plain line when waiting starts. Silent otherwise.
 */
export function showWaiting(client: LockClient, key: string, verbose: boolean): () => void {
  const tty = process.stderr.isTTY === true
  if (!tty && !verbose) return () => {}
  const started = performance.now()
  let holder = ''
  let unreachable: string | undefined
  let stopped = false
  const describe = async () => {
    try {
      const info = await client.inspect(key, { signal: AbortSignal.timeout(2000) })
      unreachable = undefined
      holder = info.held
        ? `, held by ${info.owner ?? 'unknown'}${info.fence === undefined ? '' : ` (fence ${info.fence})`}`
        : ''
    } catch (error) {
      // Never let an outage look like contention: say the store cannot be reached, and why.
      unreachable = reasonOf(error)
    }
  }
  const line = () =>
    unreachable === undefined
      ? `waiting for ${key}${holder}`
      : `store unreachable (${unreachable}), retrying ${key}`
  if (!tty) {
    const timer = setTimeout(() => {
      void describe().then(() => {
        if (!stopped) process.stderr.write(`fencelock: ${line()}\n`)
      })
    }, 200)
    timer.unref()
    return () => {
      stopped = true
      clearTimeout(timer)
    }
  }
  let ticks = 0
  const draw = () => {
    if (ticks++ % 4 === 0) void describe()
    const seconds = ((performance.now() - started) / 1000).toFixed(1)
    process.stderr.write(`\r\x1b[K${line()}, ${seconds} s`)
  }
  const timer = setInterval(draw, 250)
  timer.unref()
  return () => {
    clearInterval(timer)
    if (ticks > 0) process.stderr.write('\r\x1b[K')
  }
}

/** The plain reason of a store failure: what its message says after naming the lock and the store. */
export function reasonOf(error: unknown): string {
  const message = String((error as Error)?.message ?? error)
  const i = message.indexOf(': ')
  return i >= 0 ? message.slice(i + 2) : message
}
