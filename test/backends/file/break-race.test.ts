/**
 * A break ends the grant it found and never the one that follows it. The race: the break links its free
 * record over a stuck lease, and a waiter links its grant on top before the break lists the folder to see
 * that its link stands. That listing then shows a higher generation, as a stale link would, and the break
 * cannot tell the two apart; had it read again and broken what it found, it would end the waiter's fresh
 * lock too (seen in CI: `fencelock break` reported, and ended, the waiter's grant).
 *
 * The break runs as `fencelock break` under strace, which holds it for a second after each link() it makes,
 * so the waiter's grant (linked here by hand, as a waiter's attempt would) always gets in first.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { genName, keyFolderName } from '../../../src/backends/file/generations.js'
import { bootId, monotonicMs } from '../../../src/backends/file/host-clock.js'
import { newRecord } from '../../../src/backends/file/mutex/records.js'
import { CLI } from '../../support/processes.js'
import { tempDir } from '../../support/temp.js'
import { waitUntil } from '../../support/wait.js'

const dir = tempDir('file-break-race')
after(() => dir.cleanup())
const locks = join(dir.path, 'locks')

/** How long strace holds the break after each link(): the waiter's window. */
const HELD_AFTER_LINK_US = 1_000_000

describe('file backend: a break racing a waiter', () => {
  it('ends only the stuck grant when a waiter links its grant on the break before the break looks', async () => {
    const key = 'race'
    const folder = join(locks, keyFolderName(key))
    mkdirSync(folder, { recursive: true })
    const held = (owner: string, fence: bigint) =>
      JSON.stringify(
        newRecord(
          { key, state: 'held', owner, fence, base: 1000n, deadline: monotonicMs() + 60_000 },
          bootId(),
        ),
      )
    // Generation 1: the stuck lease (no processes recorded: its 60 s ttl alone would end it).
    writeFileSync(join(folder, genName(1n)), held('stuck', 1001n))
    // The waiter's grant, for generation 3, on top of the break's generation 2.
    const waiterGrant = join(dir.path, 'waiter-grant')
    writeFileSync(waiterGrant, held('waiter', 1003n))

    const delay = `link,linkat:delay_exit=${HELD_AFTER_LINK_US}`
    const args = ['-f', '-o', '/dev/null', '-e', 'trace=link,linkat', '-e', `inject=${delay}`]
    const url = pathToFileURL(locks).href
    const broke = promisify(execFile)('strace', [
      ...args,
      process.execPath,
      CLI,
      'break',
      key,
      '--yes',
      '--url',
      url,
    ])
    broke.catch(() => {}) // Awaited below; its failure is the test's.
    await waitUntil(() => existsSync(join(folder, genName(2n))), "the break's free record", {
      withinMs: 60_000,
      everyMs: 5,
    })
    linkSync(waiterGrant, join(folder, genName(3n)))

    const { stdout } = await broke
    const result = JSON.parse(stdout)
    assert.deepEqual(
      [result.broken, result.owner, result.fence],
      [true, 'stuck', '1001'],
      `the break ended the stuck grant, and says so: ${stdout}`,
    )
    const gens = readdirSync(folder).filter((name) => /^\d+$/.test(name))
    assert.equal(gens.sort().at(-1), genName(3n), `no generation over the waiter's grant: ${gens}`)
    assert.equal(JSON.parse(readFileSync(join(folder, genName(3n)), 'utf8')).owner, 'waiter')
  })
})
