/**
 * `fencelock run --limit N [--permits K]`: the key names a semaphore, and the command runs holding K of
 * its N permits. The arguments refused before any I/O (exit 64 and what to do); on the file backend, at
 * most N commands at once among processes started together, with the semaphore in their environment; a
 * run with another --limit than the stored one refused (exit 64) while the semaphore is in use.
 */
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { awaitLater } from '../support/later.js'
import { runCli } from '../support/processes.js'
import { tempDir } from '../support/temp.js'
import { waitUntil } from '../support/wait.js'

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

describe('fencelock run --limit on the file backend', { timeout: 120_000 }, () => {
  it('runs at most --limit commands at once, each with the semaphore in its environment', async () => {
    const slots = join(dir.path, 'slots')
    mkdirSync(slots)
    // Each command claims one of two slot folders (mkdir is atomic): a third at once finds none free.
    const claim =
      'if mkdir "$S/1" 2>/dev/null; then s=1; elif mkdir "$S/2" 2>/dev/null; then s=2; ' +
      'else echo over >> "$S/over"; exit 3; fi; ' +
      'echo "$FENCELOCK_SEMAPHORE $FENCELOCK_PERMITS $FENCELOCK_SEQUENCE" >> "$S/env"; sleep 0.3; rmdir "$S/$s"'
    const runs = [0, 1, 2, 3, 4].map(() =>
      runCli(['run', 'renders', '--url', url, '--limit', '2', '--', 'sh', '-c', claim], {
        env: { ...process.env, S: slots },
      }),
    )
    const results = await Promise.all(runs)
    for (const r of results) assert.equal(r.code, 0, r.stderr)
    const env = readFileSync(join(slots, 'env'), 'utf8').trim().split('\n')
    assert.equal(env.length, 5)
    const sequences = env.map((line) => {
      const [name, permits, sequence] = line.split(' ')
      assert.equal(name, 'renders')
      assert.equal(permits, '1')
      return sequence
    })
    assert.equal(new Set(sequences).size, 5, `every run has its own sequence: ${sequences}`)
  })

  it('refuses another --limit while the semaphore is in use, naming the stored one', async () => {
    const inside = join(dir.path, 'builds-inside')
    const holding = awaitLater(
      runCli(['run', 'builds', '--url', url, '--limit', '2', '--', 'sh', '-c', `touch "${inside}"; sleep 3`]),
    )
    await waitUntil(() => existsSync(inside), 'the first run to hold its permit', { withinMs: 60_000 })
    const refused = await runCli([
      'run',
      'builds',
      '--url',
      url,
      '--limit',
      '3',
      '--timeout',
      '0',
      '--',
      'true',
    ])
    assert.equal(refused.code, 64, refused.stderr)
    assert.match(refused.stderr, /has limit 2, not 3/)
    assert.equal((await holding).code, 0)
  })
})
