import { randomUUID } from 'node:crypto'
import { memoryBackend } from '../../src/backends/memory/index.js'
import { createLockClient } from '../../src/index.js'
import { defineConformanceSuite } from '../conformance/suite.js'

// One named store per run: every client of the suite shares it, as processes share a real server.
const name = randomUUID()

defineConformanceSuite({
  name: 'memory',
  createClient: (options) => createLockClient(`memory:${name}`, options),
  createBackend: () => memoryBackend({ name }),
  breakLease: async (key) => memoryBackend({ name }).breakLock(key),
})
