/**
 * A kit's store for one describe block of a backend's own tests (the conformance suite has its own): started
 * before the block's tests, closed after them together with every client they made through `client()`.
 */
import { after, before } from 'node:test'
import { type ClientOptions, createLockClient, type LockClient } from '../../src/index.js'
import type { Kit, KitStore } from './kit.js'

export interface SuiteStore {
  /** The started store. */
  store(): KitStore
  /** A new client of the store's URL with the block's options (`overrides` on top), closed after the block. */
  client(overrides?: ClientOptions): LockClient
}

/** Starts `kit`'s store for the describe block it is called in; its clients take `options`. */
export function suiteStore(kit: Kit, options: ClientOptions): SuiteStore {
  let started: KitStore | undefined
  const open: LockClient[] = []
  const store = () => {
    if (!started)
      throw new Error(`${kit.id}: the store is not started (call suiteStore inside a describe block)`)
    return started
  }
  before(async () => {
    started = await kit.start()
  })
  after(async () => {
    await Promise.all(open.splice(0).map((c) => c.close()))
    await started?.close()
  })
  return {
    store,
    client(overrides = {}) {
      const c = createLockClient(store().url(), { ...options, ...overrides })
      open.push(c)
      return c
    },
  }
}
