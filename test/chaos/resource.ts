/**
 * The protected resource of a chaos run: what the lock is for. A tiny HTTP server on loopback, in the
 * harness process, that takes writes carrying a fence:
 * - fenced: rejects a write whose fence is not above the highest it has accepted for the key (a stale
 *   holder, paused past its lease, is refused: this is what fencing tokens are for);
 * - unfenced: accepts everything.
 * A worker reads the key's state (a list of values), works, and writes the list back with its own value
 * added: a read-modify-write, as on a real resource. Two writers that overlap both read the same list, and
 * the second write drops the first one's value: a lost update, which the checker finds in the final state.
 */
import { createServer, type Server } from 'node:http'
import type { HistoryEvent } from './history.js'

export type ResourceMode = 'fenced' | 'unfenced'

export class ProtectedResource {
  readonly #highest = new Map<string, bigint>()
  readonly #values = new Map<string, string[]>()
  #server: Server | undefined
  #port = 0

  constructor(
    readonly mode: ResourceMode,
    /** Where decisions go, stamped by the harness clock. */
    private readonly record: (event: Record<string, unknown> & { ev: HistoryEvent['ev'] }) => void,
  ) {}

  get port(): number {
    return this.#port
  }

  async start(): Promise<void> {
    this.#server = createServer((req, res) => {
      if (req.method === 'GET') {
        const key = new URL(req.url ?? '/', 'http://x').searchParams.get('key') ?? ''
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify(this.#values.get(key) ?? []))
        return
      }
      let body = ''
      req.on('data', (chunk) => {
        body += chunk
      })
      req.on('end', () => {
        try {
          const { op, key, fence, value, values } = JSON.parse(body) as {
            op: string
            key: string
            fence: string
            value: string
            values: string[]
          }
          const accepted = this.#write(op, key, fence, value, values)
          res.writeHead(accepted ? 200 : 409).end()
        } catch {
          res.writeHead(400).end()
        }
      })
    })
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve))
    const address = this.#server.address()
    this.#port = typeof address === 'object' && address ? address.port : 0
  }

  #write(op: string, key: string, fence: string, value: string, values: string[]): boolean {
    const highest = this.#highest.get(key) ?? -1n
    const token = BigInt(fence)
    const accepted = this.mode === 'unfenced' || token > highest
    // Recorded in the same step as the decision: the history's order is the resource's order.
    this.record({
      ev: accepted ? 'write-accepted' : 'write-rejected',
      op,
      key,
      fence,
      value,
      highest: highest.toString(),
    })
    if (!accepted) return false
    if (token > highest) this.#highest.set(key, token)
    this.#values.set(key, values)
    return true
  }

  /** Records the final state of every key (for the lost-update check) and stops the server. */
  async close(): Promise<void> {
    for (const [key, values] of this.#values) this.record({ ev: 'final-read', key, values })
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()))
  }
}
