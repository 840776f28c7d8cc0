/**
 * `fencelock run --limit N [--permits K]`: the key names a semaphore, and the command runs holding K of
 * its N permits. Here: the arguments refused before any I/O, with exit 64 and what to do.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { runCli } from '../support/processes.js'
import { tempDir } from '../support/temp.js'

const dir = tempDir('cli-semaphore')
after(() => dir.cleanup())
const url = pathToFileURL(join(dir.path, 'locks')).href

describe('fencelock run --limit', { timeout: 60_000 }, () => {
  for (const [args, says] of [
    [['--permits', '2'], /--permits needs --limit/],
    [['--limit', '0'], /--limit must be a whole number of at least 1, got "0"/],
    [['--limit', 'two'], /--limit must be a whole number/],
    [['--limit', '2', '--permits', '3'], /--permits 3 is more than --limit 2/],
    [['--limit', '2', '--permits', '1.5'], /--permits must be a whole number/],
  ] as const) {
    it(`refuses ${args.join(' ')} with exit 64`, async () => {
      const result = await runCli(['run', 'jobs', '--url', url, ...args, '--', 'true'])
      assert.equal(result.code, 64, result.stderr)
      assert.match(result.stderr, says)
    })
  }
})
