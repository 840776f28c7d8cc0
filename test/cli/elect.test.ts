/**
 * `fencelock elect` and `fencelock observe` on the file backend (the CLI's default store): the command
 * run while leading with the election in its environment, a second candidate waiting for the first's
 * command to end, the exit codes (the command's own, 75 not leading within --timeout, 76 leadership
 * lost), and observe's JSON lines (--once, and a line at every change until SIGTERM).
 */
import assert from 'node:assert/strict'
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { fileBackend } from '../../src/backends/file/index.js'
import { createLockClient } from '../../src/index.js'
import { CLI } from '../support/processes.js'
import { tempDir } from '../support/temp.js'
import { sleep } from '../support/time.js'
import { waitUntil } from '../support/wait.js'

const dir = tempDir('cli-elect')
after(() => dir.cleanup())
const locks = join(dir.path, 'locks')
const url = pathToFileURL(locks).href
let n = 0
const election = (label: string) => `elect-${label}-${n++}`
const file = (label: string) => join(dir.path, `${label}-${n++}`)

interface Running {
  readonly child: ChildProcessWithoutNullStreams
  /** Resolves with the exit code (or the signal's name). */
  readonly exited: Promise<number | string>
  /** The next line printed on stdout, parsed as JSON. */
  nextLine(withinMs?: number): Promise<Record<string, unknown>>
  readonly stderr: () => string
}

/** Starts the compiled CLI with `args`, FENCELOCK_URL set to this test's lock folder. */
function fencelock(args: string[]): Running {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, FENCELOCK_URL: url },
    stdio: 'pipe',
  })
  let stderr = ''
  child.stderr.on('data', (chunk) => {
    stderr += chunk
  })
  const lines: string[] = []
  const waiters: Array<() => void> = []
  createInterface({ input: child.stdout }).on('line', (line) => {
    lines.push(line)
    for (const wake of waiters.splice(0)) wake()
  })
  const exited = new Promise<number | string>((resolve) => {
    child.on('close', (code, signal) => {
      resolve(code ?? signal ?? 'unknown')
      for (const wake of waiters.splice(0)) wake()
    })
  })
  return {
    child,
    exited,
    stderr: () => stderr,
    async nextLine(withinMs = 20_000) {
      await waitUntil(
        () => lines.length > 0 || child.exitCode !== null,
        () => `a line from fencelock ${args.join(' ')} (stderr: ${stderr})`,
        { withinMs },
      )
      const line = lines.shift()
      if (line === undefined) throw new Error(`fencelock ${args.join(' ')} exited: ${stderr}`)
      return JSON.parse(line) as Record<string, unknown>
    },
  }
}

/** `fencelock elect <name> [flags] -- sh -c <script>`. */
const elect = (name: string, script: string, flags: string[] = []): Running =>
  fencelock(['elect', name, ...flags, '--', 'sh', '-c', script])

/**
 * A leader whose command runs until `stop()`, then runs `then` (a shell line, with the election in its
 * environment) and exits; resolves once the command has started.
 */
async function leading(name: string, then = 'true'): Promise<{ run: Running; stop: () => void }> {
  const [started, stop] = [file('started'), file('stop')]
  const run = elect(name, `touch ${started}; while [ ! -e ${stop} ]; do sleep 0.05; done; ${then}`)
  await waitUntil(() => existsSync(started), 'the first command to start', { withinMs: 20_000 })
  return { run, stop: () => writeFileSync(stop, '') }
}

describe('fencelock elect', () => {
  it('runs the command with the election, term, fence and value in its environment, exiting with its status', async () => {
    const name = election('env')
    const out = file('env')
    const run = elect(
      name,
      `printf '%s|%s|%s|%s' "$FENCELOCK_ELECTION" "$FENCELOCK_TERM" "$FENCELOCK_FENCE" "$FENCELOCK_VALUE" > ${out}; exit 7`,
      ['--value', 'http://10.0.0.7:8080 é'],
    )
    assert.equal(await run.exited, 7, run.stderr())
    const [seenName, term, fence, value] = readFileSync(out, 'utf8').split('|')
    assert.equal(seenName, name)
    assert.ok(BigInt(term!) > 0n)
    assert.equal(fence, term)
    assert.equal(value, 'http://10.0.0.7:8080 é')
  })

  it("a second candidate waits until the first's command has exited, then leads with a greater term", async () => {
    const name = election('wait')
    const log = file('log')
    const first = await leading(name, `echo "first $FENCELOCK_TERM" >> ${log}`)
    const second = elect(name, `echo "second $FENCELOCK_TERM" >> ${log}`, ['--timeout', '60s'])
    // However long it waits, the second command cannot run while the first leads.
    await sleep(500)
    assert.equal(existsSync(log), false, 'the second command ran while the first led')
    first.stop()
    assert.equal(await first.run.exited, 0, first.run.stderr())
    assert.equal(await second.exited, 0, second.stderr())
    const lines = readFileSync(log, 'utf8').trim().split('\n')
    assert.deepEqual(
      lines.map((line) => line.split(' ')[0]),
      ['first', 'second'],
    )
    const [firstTerm, secondTerm] = lines.map((line) => BigInt(line.split(' ')[1]!))
    assert.ok(secondTerm! > firstTerm!)
  })

  it('exits 75 with --timeout 0 while another candidate leads', async () => {
    const name = election('busy')
    const first = await leading(name)
    try {
      const second = elect(name, 'true', ['--timeout', '0'])
      assert.equal(await second.exited, 75, second.stderr())
    } finally {
      first.stop()
      assert.equal(await first.run.exited, 0, first.run.stderr())
    }
  })

  it('exits 76 when leadership is lost while the command runs', async () => {
    const name = election('lost')
    const started = file('started')
    const run = elect(name, `touch ${started}; sleep 60`, ['--ttl', '3s', '--kill-after', '2s'])
    await waitUntil(() => existsSync(started), 'the command to start', { withinMs: 20_000 })
    // Ended behind its back; its next renewal (a second later) finds it gone.
    const backend = fileBackend({ dir: locks })
    try {
      assert.equal((await backend.election.breakLock(name)).broken, true)
    } finally {
      await backend.close()
    }
    assert.equal(await run.exited, 76, run.stderr())
  })
})

describe('fencelock observe', () => {
  it('--once prints one JSON line: nobody leads, then the leader with its value and term', async () => {
    const name = election('once')
    const vacant = fencelock(['observe', name, '--once'])
    assert.deepEqual(await vacant.nextLine(), { election: name, backend: `file://${locks}`, leader: false })
    assert.equal(await vacant.exited, 0, vacant.stderr())
    const client = createLockClient(url, { ttl: '20s' })
    try {
      const lead = await client.election(name).campaign({ value: 'v é' })
      const led = fencelock(['observe', name, '--once'])
      const line = await led.nextLine()
      assert.equal(await led.exited, 0, led.stderr())
      assert.equal(line.leader, true)
      assert.equal(line.value, 'v é')
      assert.equal(line.term, lead.term.toString())
      assert.equal(line.election, name)
      await lead.resign()
    } finally {
      await client.close()
    }
  })

  it('prints a line when a leader comes and when it leaves; SIGTERM ends it with 0', async () => {
    const name = election('running')
    const observe = fencelock(['observe', name])
    const client = createLockClient(url, { ttl: '20s' })
    try {
      assert.equal((await observe.nextLine()).leader, false)
      const lead = await client.election(name).campaign({ value: 'here' })
      const came = await observe.nextLine()
      assert.equal(came.leader, true)
      assert.equal(came.value, 'here')
      assert.equal(came.term, lead.term.toString())
      await lead.resign()
      assert.equal((await observe.nextLine()).leader, false)
      observe.child.kill('SIGTERM')
      assert.equal(await observe.exited, 0, observe.stderr())
    } finally {
      observe.child.kill('SIGKILL')
      await client.close()
    }
  })
})
