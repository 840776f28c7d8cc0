/**
 * The test's own process helpers: what a `fencelock hold` child prints is reported by `next`, never thrown
 * in an event handler (an error there fails the whole test file after its tests, naming none of them).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { startHold } from './processes.js'
import { tempDir } from './temp.js'

describe('startHold', () => {
  it('reports a line that is not JSON in the error of next, with the exit', async () => {
    const folder = tempDir('hold-help')
    try {
      // --help prints the usage (not JSON) and exits 0 before it opens anything.
      const hold = startHold(`file://${folder.path}`, 'k', ['--help'])
      await assert.rejects(hold.next('acquired'), (error: Error) => {
        assert.match(error.message, /exited \(0\) before "acquired"/)
        assert.match(error.message, /"line":"Usage: fencelock hold <key> \[options\]"/)
        return true
      })
      assert.deepEqual(hold.events[0], { line: 'Usage: fencelock hold <key> [options]' })
    } finally {
      folder.cleanup()
    }
  })
})
