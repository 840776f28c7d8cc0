/** The memory backend's kit: one named store per start, shared by every client of this process. */
import { randomUUID } from 'node:crypto'
import { memoryBackend } from '../../src/backends/memory/index.js'
import { type Kit, RACE, ttlStore } from './kit.js'

export const memoryKit: Kit = {
  id: 'memory',
  backend: 'memory',
  title: 'memory',
  entry: 'memory/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'rwlock'],
  networked: false,
  capabilities: ttlStore({ processes: false }),
  lacks: {
    fifo: RACE,
    session: "leases end by this process's clock, no session",
    durableFences: 'the store lives and dies with this process',
    processes: 'the store lives in this process',
  },
  async start() {
    const name = randomUUID()
    return {
      url: () => `memory:${name}`,
      ports: [],
      breakLease: async (key) => {
        await memoryBackend({ name }).breakLock(key)
      },
      logs: () => ({}),
      recoveryMs: 0,
      close: async () => {},
    }
  },
  bench: [{ name: 'fencelock memory', store: 'memory' }],
}
