import assert from 'node:assert/strict'
import type { ConformanceCase } from '../../harness.js'

/** The kit gates cases by its capabilities: they must be the backend's own, or a case would be skipped (or run) wrongly. */
export const capabilityCases: ConformanceCase[] = [
  {
    name: "the kit's capabilities are the backend's own (fifo, notify, session)",
    async run(ctx) {
      const backend = await ctx.backend()
      try {
        const { fifo, notify, session } = ctx.kit.capabilities
        assert.equal(fifo, backend.capabilities.fifo, 'fifo')
        assert.equal(notify, backend.capabilities.notify, 'notify')
        assert.equal(session, backend.capabilities.expiry === 'session', 'session')
      } finally {
        await backend.close()
      }
    },
  },
]
