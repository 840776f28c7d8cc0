// redlock@5.0.0-beta.2 ships type declarations that its package.json "exports" map does not expose to
// NodeNext resolution; these are the few members the benchmark uses.
declare module 'redlock' {
  import type { EventEmitter } from 'node:events'
  export default class Redlock extends EventEmitter {
    constructor(
      clients: Iterable<unknown>,
      settings?: Partial<Record<'retryCount' | 'retryDelay' | 'retryJitter', number>>,
    )
    acquire(resources: string[], duration: number): Promise<{ release(): Promise<unknown> }>
  }
}
