import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { CLI, runCli, startHold } from '../support/processes.js'
import { tempDir } from '../support/temp.js'

const dir = tempDir('cli-list-break')
after(() => dir.cleanup())
const url = pathToFileURL(join(dir.path, 'locks')).href
let n = 0
const key = (label: string) => `ops-${label}-${n++}`
const cli = (args: string[]) => runCli([...args, '--url', url])

/** Runs the CLI on a terminal (util-linux `script` gives it a pty), typing `input`; resolves with its output. */
function onTerminal(args: string[], input: string): Promise<{ code: number | null; output: string }> {
  const line = [process.execPath, CLI, ...args, '--url', url].map((a) => `'${a.replaceAll("'", "'\\''")}'`)
  const child = spawn('script', ['-qec', line.join(' '), '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk) => {
    output += chunk
    // Answer once the question is on the screen: typed earlier, the terminal would echo it before.
    if (output.includes('[y/N]') && !child.stdin.writableEnded) child.stdin.end(input)
  })
  child.stderr.on('data', (chunk) => {
    output += chunk
  })
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, output })))
}

describe('fencelock list', () => {
  it('prints the held locks under a prefix as a table, and as JSON lines with --json', async () => {
    const prefix = key('list')
    const a = startHold(url, `${prefix}/a`, ['--holder', 'deploy a'])
    const b = startHold(url, `${prefix}/b`)
    const beside = startHold(url, `${prefix}-beside`)
    const [fa, fb] = await Promise.all([a.next('acquired'), b.next('acquired'), beside.next('acquired')])

    const table = await cli(['list', `${prefix}/`])
    assert.equal(table.code, 0, table.stderr)
    const rows = table.stdout.trimEnd().split('\n')
    assert.match(rows[0] ?? '', /^KEY\s+FENCE\s+LEASE LEFT\s+HOLDER$/)
    assert.equal(rows.length, 3, table.stdout)
    assert.match(rows[1] ?? '', new RegExp(`^${prefix}/a\\s+${fa?.fence}\\s+\\d+\\.\\d s\\s+deploy a$`))
    assert.match(rows[2] ?? '', new RegExp(`^${prefix}/b\\s+${fb?.fence}\\s`))

    const json = await cli(['list', `${prefix}/`, '--json'])
    const lines = json.stdout
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    assert.deepEqual(
      lines.map((l) => [l.key, l.owner, l.fence, l.holder]),
      [
        [`${prefix}/a`, fa?.owner, fa?.fence, 'deploy a'],
        [`${prefix}/b`, fb?.owner, fb?.fence, lines[1]?.holder],
      ],
    )
    assert.equal(lines[0]?.backend, url)

    for (const hold of [a, b, beside]) hold.child.stdin.end('release\n')
    await Promise.all([a.exited, b.exited, beside.exited])
    const none = await cli(['list', `${prefix}/`])
    assert.equal(none.code, 0)
    assert.equal(none.stdout, '')
    assert.match(none.stderr, /^0 locks held under ".*\/" on file:/)
  })
})

describe('fencelock break', () => {
  it('frees a stuck lock keeping its fence; the holder learns it at its next renewal and exits 76', async () => {
    const k = key('break')
    // A lease long enough that a loaded machine's stalls never end it before the break (at 3 s, a CI run
    // saw the waiter take it over first); the holder still hears of the break at its next renewal (ttl/3).
    const stuck = startHold(url, k, ['--ttl', '15s'])
    const held = await stuck.next('acquired')
    const waiter = startHold(url, k)
    const r = await cli(['break', k, '--yes'])
    assert.equal(r.code, 0, r.stderr)
    assert.deepEqual(
      { ...JSON.parse(r.stdout), holder: undefined },
      { key: k, backend: url, broken: true, owner: held.owner, fence: held.fence, holder: undefined },
    )
    const next = await waiter.next('acquired', 30_000)
    assert.ok(BigInt(next.fence as string) > BigInt(held.fence as string), 'the fence never goes back')
    await stuck.next('lost', 30_000)
    assert.equal(await stuck.exited, 76)

    // Aimed at the broken grant, a second break leaves the new holder alone.
    const again = await cli(['break', k, '--yes', '--fence', String(held.fence)])
    assert.equal(JSON.parse(again.stdout).broken, false)
    assert.equal(JSON.parse(again.stdout).fence, next.fence)
    waiter.child.stdin.end('release\n')
    assert.equal(await waiter.exited, 0)
  })

  it('refuses without --yes when there is no terminal to ask on', async () => {
    const k = key('no-yes')
    const hold = startHold(url, k)
    await hold.next('acquired')
    const r = await cli(['break', k])
    assert.equal(r.code, 64)
    assert.match(r.stderr, /pass --yes to confirm/)
    assert.equal(r.stdout, '')
    hold.child.stdin.end('release\n')
    assert.equal(await hold.exited, 0, 'the lock was not broken')
  })

  it('on a terminal shows the holder and breaks only on a yes', async () => {
    const k = key('ask')
    const hold = startHold(url, k, ['--holder', 'stuck job', '--ttl', '3s'])
    const held = await hold.next('acquired')
    const no = await onTerminal(['break', k], 'n\n')
    assert.equal(no.code, 0, no.output)
    assert.match(no.output, new RegExp(`held by stuck job, fence ${held.fence}[\\s\\S]*Break it\\?`))
    assert.doesNotMatch(no.output, /"broken"/)
    const yes = await onTerminal(['break', k], 'y\n')
    assert.match(yes.output, /"broken":true/, yes.output)
    await hold.next('lost', 30_000)
    assert.equal(await hold.exited, 76)
  })

  it('says what is wrong with a bad --fence', async () => {
    const r = await cli(['break', key('bad-fence'), '--yes', '--fence', '0x1f'])
    assert.equal(r.code, 64)
    assert.match(r.stderr, /--fence: expected a lock's fence, a positive whole number, got "0x1f"/)
  })
})
