import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const root = fileURLToPath(new URL('../../', import.meta.url))

it('the README shows examples/quickstart.ts verbatim', () => {
  const readme = readFileSync(`${root}README.md`, 'utf8')
  const example = readFileSync(`${root}examples/quickstart.ts`, 'utf8')
  assert.ok(readme.includes(`\`\`\`ts\n${example}\`\`\``), 'README and examples/quickstart.ts differ')
})

it('examples/quickstart.ts runs and prints what the README says', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [`${root}build/examples/quickstart.js`])
  const lines = stdout.trim().split('\n')
  assert.match(lines[0]!, /^holding reports:nightly with fence \d+$/)
  assert.equal(lines[1], 'got jobs:42')
  assert.match(lines[2]!, /^ran under fence \d+$/)
  assert.match(lines[3]!, /held: false/)
})
