/**
 * The pub/sub side of waiting: one subscriber connection per backend, shared by its waiters. Its one timer
 * (the sweep of channels idle for LINGER_MS) manages that connection's subscriptions, the driver's
 * business: the core's waiting never sees it.
 */
import type { Cluster, Redis } from 'ioredis'

type Client = Redis | Cluster

interface Waiter {
  /** In fair mode, only a message naming this owner (or naming nobody) wakes it. */
  readonly owner: string | undefined
  /** The owner id of the waiting acquire: a plain-mode ">" .. owner message wakes that waiter alone. */
  readonly self: string | undefined
  /** Wakes the waiter with the message that concerned it, or with nothing (abort, subscription ready). */
  wake(message?: string): void
}

/** How long a channel stays subscribed after its last waiter left: contended keys come back at once. */
const LINGER_MS = 5000

/**
 * One subscriber connection shared by every waiter of a backend, subscribed to the channels of the keys
 * being waited on. A wait that starts before its channel's SUBSCRIBE is confirmed wakes once when it is
 * (a spurious wake-up): a release published before that moment would otherwise be missed, and the
 * core's re-attempt after any wake-up closes that gap.
 */
export class Subscriptions {
  readonly #client: Client
  readonly #owned: Client[]
  #subscriber: Client | undefined
  readonly #waiters = new Map<string, Set<Waiter>>()
  /** Channel → its SUBSCRIBE, settled once the server confirmed it. */
  readonly #subscribed = new Map<string, { ready: boolean; promise: Promise<void> }>()
  /**
   * Channels without waiters, and since when (the monotonic clock). A timestamp per leave and one sweep
   * timer, not a timer per leave: a waiter leaves on every wake-up, on the path of every hand-over.
   */
  readonly #idleSince = new Map<string, number>()
  #sweep: NodeJS.Timeout | undefined
  #closed = false

  constructor(client: Client, owned: Client[]) {
    this.#client = client
    this.#owned = owned
  }

  #connection(): Client {
    if (!this.#subscriber) {
      // SUBSCRIBE may wait for the connection (a client made with enableOfflineQueue: false, as Redlock's
      // are, would fail it at once while connecting, and every wait would wake straight away).
      const client = this.#client
      const subscriber = (
        (client as { isCluster?: boolean }).isCluster
          ? (client as Cluster).duplicate()
          : (client as Redis).duplicate({ enableOfflineQueue: true })
      ) as Client
      subscriber.on('error', () => {})
      subscriber.on('message', (channel: string, message: string) => this.#deliver(channel, message))
      this.#owned.push(subscriber)
      this.#subscriber = subscriber
    }
    return this.#subscriber
  }

  #deliver(channel: string, message: string): void {
    const set = this.#waiters.get(channel)
    if (!set) return
    if (message[0] === '>') {
      // A free lock reserved for one starving waiter (plain mode): any other would be refused.
      const named = message.slice(1)
      for (const waiter of set) {
        if (waiter.self !== named) continue
        waiter.wake(message)
        return
      }
      return
    }
    for (const waiter of [...set]) {
      const { owner } = waiter
      if (owner === undefined) {
        // One release frees the lock for one holder: wake this process's oldest waiter only, not a herd
        // that would all re-attempt and all but one fail. The others wait for the next release (or their
        // holder-expiry and fallback timers), and being woken oldest-first keeps this process roughly fair.
        waiter.wake(message)
        return
      }
      // '' and "-<owner>" (a plain release) concern every waiter; "<owner>…" only that one.
      if (message === '' || message[0] === '-' || message === owner || message.startsWith(`${owner}:`)) {
        waiter.wake(message)
      }
    }
  }

  /** Resolves with the message that woke the waiter, if a message did. */
  wait(
    channel: string,
    owner: string | undefined,
    signal: AbortSignal,
    self?: string,
  ): Promise<string | undefined> {
    if (this.#closed || signal.aborted) return Promise.resolve(undefined)
    return new Promise<string | undefined>((resolve) => {
      let set = this.#waiters.get(channel)
      if (!set) {
        set = new Set()
        this.#waiters.set(channel, set)
      }
      const waiter: Waiter = {
        owner,
        self,
        wake: (message) => {
          signal.removeEventListener('abort', onAbort)
          this.#leave(channel, waiter)
          resolve(message)
        },
      }
      const onAbort = () => waiter.wake()
      set.add(waiter)
      signal.addEventListener('abort', onAbort, { once: true })
      this.#idleSince.delete(channel)
      const subscription = this.#subscribe(channel)
      if (!subscription.ready)
        subscription.promise.then(
          () => waiter.wake(),
          () => waiter.wake(),
        )
    })
  }

  #subscribe(channel: string): { ready: boolean; promise: Promise<void> } {
    let subscription = this.#subscribed.get(channel)
    if (!subscription) {
      const entry = { ready: false, promise: Promise.resolve() }
      entry.promise = this.#connection()
        .subscribe(channel)
        .then(
          () => {
            entry.ready = true
          },
          () => {
            // Not subscribed: forget it so the next wait tries again; the core's poll covers meanwhile.
            this.#subscribed.delete(channel)
          },
        )
      subscription = entry
      this.#subscribed.set(channel, subscription)
    }
    return subscription
  }

  #leave(channel: string, waiter: Waiter): void {
    const set = this.#waiters.get(channel)
    if (!set) return
    set.delete(waiter)
    if (set.size > 0) return
    this.#waiters.delete(channel)
    this.#idleSince.set(channel, performance.now())
    this.#sweepLater()
  }

  /**
   * Not a wait nor a retry (the core owns those): it only keeps a busy channel subscribed a little longer,
   * and unsubscribes the channels idle for LINGER_MS. Runs while some channel is idle; unref'd.
   */
  #sweepLater(): void {
    if (this.#sweep || this.#closed) return
    this.#sweep = setTimeout(() => {
      this.#sweep = undefined
      const now = performance.now()
      for (const [channel, since] of this.#idleSince) {
        if (now - since < LINGER_MS) continue
        this.#idleSince.delete(channel)
        if (this.#waiters.has(channel) || !this.#subscribed.has(channel)) continue
        this.#subscribed.delete(channel)
        this.#subscriber?.unsubscribe(channel).catch(() => {})
      }
      if (this.#idleSince.size > 0) this.#sweepLater()
    }, LINGER_MS / 2)
    this.#sweep.unref()
  }

  async close(): Promise<void> {
    this.#closed = true
    clearTimeout(this.#sweep)
    this.#idleSince.clear()
    for (const set of this.#waiters.values()) for (const waiter of [...set]) waiter.wake()
  }
}
