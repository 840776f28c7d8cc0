import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { runScript } from '../../support/processes.js'
import { tempDir } from '../../support/temp.js'

const CONTENDER = fileURLToPath(new URL('../../fixtures/contender.js', import.meta.url))
const dir = tempDir('file-processes')
after(() => dir.cleanup())

it(
  '20 processes contending on one file lock take turns with strictly increasing fences',
  { timeout: 180_000 },
  async () => {
    const url = pathToFileURL(join(dir.path, 'locks')).href
    const log = join(dir.path, 'log')
    const marker = join(dir.path, 'inside')
    const processes = 20
    const iterations = 5
    const codes = await Promise.all(
      Array.from({ length: processes }, () =>
        runScript(CONTENDER, [url, 'shared', String(iterations), log, marker]),
      ),
    )
    assert.deepEqual(codes, Array(processes).fill(0), 'every contender should finish cleanly')
    const lines = readFileSync(log, 'utf8').trim().split('\n')
    assert.deepEqual(
      lines.filter((l) => l.startsWith('OVERLAP')),
      [],
      'a contender found another holder inside the critical section',
    )
    assert.equal(lines.length, processes * iterations)
    const fences = lines.map((l) => BigInt(l.split(' ')[0]!))
    for (let i = 1; i < fences.length; i++) {
      assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} logged after ${fences[i - 1]}`)
    }
    assert.equal(new Set(lines.map((l) => l.split(' ')[1])).size, processes, 'every process got the lock')
  },
)
