import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { keyFolderName } from '../../src/backends/file/generations.js'
import { fileBackend } from '../../src/backends/file/index.js'
import { perUserFolder, sharedFolder } from '../../src/cli/lock-folder.js'
import { createLockClient } from '../../src/index.js'
import { parseBackendUrl, supportedSchemes } from '../../src/schemes.js'
import { CLI, startHold, stillRuns, waitUntilDead } from '../support/processes.js'
import { tempDir } from '../support/temp.js'
import { sleep } from '../support/time.js'
import { waitUntil } from '../support/wait.js'

const dir = tempDir('cli')
after(() => dir.cleanup())
const url = pathToFileURL(join(dir.path, 'locks')).href
/** The preload that stalls a `fencelock run` right after it lets the command start (see the file). */
const STALL_AFTER_GO = new URL('../support/stall-after-go.js', import.meta.url).href
const host = hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
let n = 0
const key = (label: string) => `cli-${label}-${n++}`

interface Result {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

function fencelock(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<Result> & { child: ReturnType<typeof spawn> } {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, FENCELOCK_URL: url, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout!.on('data', (c) => {
    stdout += c
  })
  child.stderr!.on('data', (c) => {
    stderr += c
  })
  const done = new Promise<Result>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
  return Object.assign(done, { child })
}

describe('fencelock run', () => {
  it('runs the command with FENCELOCK_KEY and FENCELOCK_FENCE and exits with its status', async () => {
    const k = key('env')
    const r = await fencelock(['run', k, '--', 'sh', '-c', 'echo "$FENCELOCK_KEY $FENCELOCK_FENCE"; exit 7'])
    assert.equal(r.code, 7)
    assert.match(r.stdout, new RegExp(`^${k} \\d+\\n$`))
    assert.equal(r.stderr, '')
  })

  it('reports a command killed by a signal as 128 + N', async () => {
    const r = await fencelock(['run', key('sig'), '--', 'sh', '-c', 'kill -TERM $$'])
    assert.equal(r.code, 128 + 15)
  })

  it('exits 127 for a command that does not exist, and releases the lock', async () => {
    const k = key('missing')
    const r = await fencelock(['run', k, '--', 'no-such-command-fencelock'])
    assert.equal(r.code, 127)
    assert.match(r.stderr, /cannot run no-such-command-fencelock/)
    const again = await fencelock(['run', k, '--timeout', '0', '--', 'true'])
    assert.equal(again.code, 0, 'the lock must have been released')
  })

  it('exits 75 when the lock stays held past --timeout, silently when stderr is not a terminal', async () => {
    const k = key('held')
    const holder = startHold(url, k)
    await holder.next('acquired')
    const r = await fencelock(['run', k, '--timeout', '300ms', '--', 'true'])
    assert.equal(r.code, 75)
    // One line for the final error only: no progress output off a terminal.
    assert.equal(r.stderr.trim().split('\n').length, 1)
    assert.match(r.stderr, /held by another owner/)
    const verbose = await fencelock(['run', k, '--timeout', '600ms', '--verbose', '--', 'true'])
    assert.equal(verbose.code, 75)
    assert.match(verbose.stderr, new RegExp(`waiting for ${k}, held by ${host} \\(pid \\d+\\), fence \\d+`))
    holder.send('release')
    assert.equal(await holder.exited, 0)
  })

  it('keeps one status line on a terminal while waiting (key, holder, fence, time waited, lease left)', async () => {
    const k = key('tty')
    const holder = startHold(url, k)
    const acquired = await holder.next('acquired')
    // script(1) gives the CLI a pseudo-terminal, as a person at a shell would have.
    const command = `${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} run ${k} --timeout 1500ms -- true`
    const r = await new Promise<string>((resolve) => {
      const child = spawn('script', ['-qec', command, '/dev/null'], {
        env: { ...process.env, FENCELOCK_URL: url },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let out = ''
      child.stdout.on('data', (c) => {
        out += c
      })
      child.on('close', () => resolve(out))
    })
    assert.match(
      r,
      new RegExp(
        `waiting for ${k}, held by ${host} \\(pid ${acquired.pid}\\), fence ${acquired.fence}; ` +
          'waited \\d+\\.\\d s; lease ends in \\d+\\.\\d s',
      ),
    )
    holder.send('release')
    await holder.exited
  })

  it('stores who holds the lock: host, pid and the command, or --holder; inspect shows it', async () => {
    const k = key('holder')
    const running = fencelock(['run', k, '--', 'sh', '-c', 'echo started; sleep 30'])
    await new Promise<void>((resolve) => running.child.stdout!.once('data', () => resolve()))
    const info = JSON.parse((await fencelock(['inspect', k])).stdout) as Record<string, unknown>
    assert.equal(info.held, true)
    assert.equal(info.holder, `${hostname()} (pid ${running.child.pid}, \`sh -c 'echo started; sleep 30'\`)`)
    running.child.kill('SIGTERM')
    await running
    const held = startHold(url, k, ['--holder', 'nightly backup'])
    await held.next('acquired')
    const r = await fencelock(['run', k, '--timeout', '600ms', '--verbose', '--', 'true'])
    assert.match(r.stderr, new RegExp(`waiting for ${k}, held by nightly backup, fence \\d+`))
    held.send('release')
    assert.equal(await held.exited, 0)
    const bad = await fencelock(['run', k, '--holder', 'a\u001b[2Jb', '--', 'true'])
    assert.equal(bad.code, 64)
    assert.match(bad.stderr, /--holder.*control characters/)
  })

  it('waits for the holder and runs once it releases, with a larger fence', async () => {
    const k = key('wait')
    const holder = startHold(url, k)
    const acquired = await holder.next('acquired')
    const running = fencelock(['run', k, '--', 'sh', '-c', 'echo $FENCELOCK_FENCE'])
    setTimeout(() => holder.send('release'), 300)
    const r = await running
    assert.equal(r.code, 0)
    assert.ok(BigInt(r.stdout.trim()) > BigInt(acquired.fence as string))
  })

  /** Runs a looping shell command under the lock, breaks the lease once it has started, returns the result. */
  async function runThenBreak(k: string, options: string[], script: string): Promise<Result> {
    const running = fencelock([
      'run',
      k,
      '--ttl',
      '600ms',
      ...options,
      '--',
      'sh',
      '-c',
      `${script}; echo started; while true; do sleep 0.05; done`,
    ])
    await untilStarted(running)
    await fileBackend({ dir: join(dir.path, 'locks') }).breakLock(k)
    return running
  }

  it('stops the command with SIGTERM and exits 76 when the lock is lost', async () => {
    const r = await runThenBreak(key('lost'), [], 'trap "echo got-term; exit 0" TERM')
    assert.equal(r.code, 76)
    assert.match(r.stdout, /got-term/)
    assert.match(r.stderr, /lost/)
  })

  /** `fencelock run` of a shell that starts a grandchild (its pid in `pidFile`), once the shell is running. */
  async function runWithGrandchild(k: string, options: string[]) {
    const pidFile = join(dir.path, `grandchild-${k}`)
    const script = `sleep 60 & echo $! > ${pidFile}; echo started; wait`
    const running = fencelock(['run', k, ...options, '--', 'sh', '-c', script])
    await untilStarted(running)
    return { running, pidFile }
  }

  it("stops the command's whole process group when the lock is lost, grandchildren included", async () => {
    const k = key('group')
    const { running, pidFile } = await runWithGrandchild(k, ['--ttl', '600ms'])
    await fileBackend({ dir: join(dir.path, 'locks') }).breakLock(k)
    // fencelock's exit, not its result: the result waits for every holder of its stdout, the grandchild too.
    const code = await new Promise((resolve) => running.child.once('exit', resolve))
    assert.equal(code, 76)
    await waitUntilDead(Number(readFileSync(pidFile, 'utf8')), 5000, 'it outlived its lock')
    await running
  })

  it('stops the command when fencelock itself is killed, before the unrenewed lease could expire', async () => {
    const { running, pidFile } = await runWithGrandchild(key('wrapper-killed'), [
      '--ttl',
      '30s',
      '--kill-after',
      '1s',
    ])
    const started = performance.now()
    running.child.kill('SIGKILL')
    const pid = Number(readFileSync(pidFile, 'utf8'))
    await waitUntilDead(pid, 10_000, 'it outlived its lock')
    assert.ok(performance.now() - started < 20_000, 'stopped well within the 30 s lease')
  })

  it('keeps the lock while the command runs after fencelock is SIGKILLed, and frees it once the group is gone', async () => {
    const k = key('wrapper-killed-held')
    const pidFile = join(dir.path, `leader-${k}`)
    // The command ignores SIGTERM, so the watchdog's SIGKILL comes only after --kill-after (60 s here).
    const script = `trap "" TERM; echo $$ > ${pidFile}; echo "started $FENCELOCK_FENCE"; while true; do sleep 0.05; done`
    const running = fencelock(['run', k, '--ttl', '60s', '--kill-after', '60s', '--', 'sh', '-c', script])
    const fence = await new Promise<bigint>((resolve) => {
      running.child.stdout!.on('data', (c: Buffer) => {
        const m = /started (\d+)/.exec(c.toString())
        if (m) resolve(BigInt(m[1]!))
      })
    })
    const group = Number(readFileSync(pidFile, 'utf8'))
    // Its exit, not its result: the result waits for every holder of its stdout, the command too.
    const exited = new Promise((resolve) => running.child.once('exit', resolve))
    running.child.kill('SIGKILL')
    await exited
    const locks = createLockClient(url)
    try {
      // The file backend frees a lease whose processes are gone: fencelock's is, its watchdog's is not.
      for (let i = 0; i < 5; i++) {
        assert.equal(await locks.tryAcquire(k), null, 'the lock was freed while the command still ran')
        assert.ok(stillRuns(group), 'the command stopped early')
        await sleep(100)
      }
      process.kill(-group, 'SIGKILL')
      // The watchdog exits once the group is gone, and with it the lease: well before the 60 s ttl.
      const lock = await locks.acquire(k, { timeout: '30s' })
      assert.ok(lock.fence > fence)
      await lock.release()
      await running
    } finally {
      await locks.close()
    }
  })

  it('stops the command when its watchdog is killed, rather than run on unguarded', async () => {
    const k = key('watchdog-killed')
    const running = fencelock(['run', k, '--', 'sh', '-c', 'echo started; while true; do sleep 0.05; done'])
    await untilStarted(running)
    // The grant names the watchdog beside fencelock (the file backend's record).
    const folder = join(dir.path, 'locks', keyFolderName(k))
    const newest = readdirSync(folder)
      .filter((f) => /^\d+$/.test(f))
      .sort()
      .at(-1)!
    const marks = JSON.parse(readFileSync(join(folder, newest), 'utf8')).processes.marks
    assert.equal(marks[0].pid, running.child.pid)
    process.kill(marks[1].pid, 'SIGKILL')
    const r = await running
    assert.equal(r.code, 128 + 15)
    assert.match(r.stderr, /watchdog process exited; stopping the command/)
  })

  it('never starts the command when its watchdog was killed while it waited for the lock', async () => {
    const k = key('watchdog-killed-waiting')
    const ranFile = join(dir.path, `ran-${k}`)
    const holder = startHold(url, k)
    await holder.next('acquired')
    const running = fencelock(['run', k, '--verbose', '--', 'sh', '-c', `echo ran > ${ranFile}`])
    await new Promise<void>((resolve) => {
      running.child.stderr!.on('data', (c: Buffer) => {
        if (c.toString().includes('waiting for')) resolve()
      })
    })
    // The watchdog is fencelock's child running the watchdog script (Linux /proc).
    const cli = running.child.pid!
    const children = readdirSync(`/proc/${cli}/task`).flatMap((t) =>
      readFileSync(`/proc/${cli}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean),
    )
    const watchdog = children.find((pid) =>
      readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('read -r line'),
    )
    assert.ok(watchdog, 'no watchdog beside fencelock')
    process.kill(Number(watchdog), 'SIGKILL')
    // Reaped by fencelock (so it has heard of the exit) before the lock comes free.
    await waitUntil(() => !existsSync(`/proc/${watchdog}`), 'fencelock to reap its watchdog', {
      withinMs: 20_000,
    })
    holder.send('release')
    assert.equal(await holder.exited, 0)
    const r = await running
    assert.notEqual(r.code, 0)
    assert.match(r.stderr, /watchdog process exited; stopping the command/)
    assert.equal(existsSync(ranFile), false, 'the command ran without its watchdog')
  })

  it('Ctrl-C stops the whole group and releases only once a grandchild that ignores it is gone', async () => {
    const k = key('interrupt')
    const pidFile = join(dir.path, `grandchild-${k}`)
    // Ignored signals stay ignored across exec: the grandchild ignores SIGINT and SIGTERM for good.
    const script = `trap "" INT TERM; (trap "" INT TERM; exec sleep 60) & echo $! > ${pidFile}; echo started; wait`
    const running = fencelock(['run', k, '--kill-after', '1s', '--', 'sh', '-c', script])
    await untilStarted(running)
    const grandchild = Number(readFileSync(pidFile, 'utf8'))
    const locks = createLockClient(url)
    try {
      const next = locks.acquire(k, { timeout: '60s' }).then((lock) => {
        // The moment the lock is free again, nothing the command started may still run (a zombie, killed
        // and not yet collected by init, runs nothing).
        return { lock, alive: stillRuns(grandchild) }
      })
      running.child.kill('SIGINT')
      const { lock, alive } = await next
      assert.equal(alive, false, 'the lock was released while a grandchild still ran')
      await lock.release()
      const r = await running
      // fencelock passed the Ctrl-C on and waited (it did not die of it, leaving the job to its watchdog).
      assert.equal(r.code, 128 + 9, `the shell ends by the SIGKILL after --kill-after: ${r.stderr}`)
    } finally {
      await locks.close()
    }
  })

  it('passes a Ctrl-C sent the instant the command starts to its group, and never dies of it', async () => {
    const k = key('interrupt-at-start')
    const resume = join(dir.path, `resume-${k}`)
    // fencelock stalls right after it lets the command go (as when the command takes the CPU at once),
    // until the Ctrl-C below has been sent: the signal finds the handlers fencelock had by then.
    const running = fencelock(['run', k, '--', 'sh', '-c', 'echo started; exec sleep 60'], {
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${STALL_AFTER_GO}`,
      FENCELOCK_TEST_RESUME: resume,
    })
    await untilStarted(running)
    running.child.kill('SIGINT')
    writeFileSync(resume, '')
    const r = await running
    assert.equal(r.signal, null, `fencelock died of the Ctrl-C it should have passed on: ${r.stderr}`)
    assert.equal(r.code, 128 + 2, 'the command gets SIGINT and fencelock exits with its status')
    assert.equal(r.stderr, '')
  })

  it('holds the lock until a background child the command left behind has exited, as flock(1)', async () => {
    const k = key('background')
    const doneFile = join(dir.path, `background-${k}`)
    const script = `(sleep 1; echo done > ${doneFile}) & echo started`
    const running = fencelock(['run', k, '--', 'sh', '-c', script])
    await untilStarted(running)
    const locks = createLockClient(url)
    try {
      const lock = await locks.acquire(k, { timeout: '60s' })
      assert.ok(existsSync(doneFile), 'granted while the background child still ran')
      await lock.release()
      assert.equal((await running).code, 0)
    } finally {
      await locks.close()
    }
  })

  it('releases once only zombies are left in the group, whose parent never collects them', async () => {
    // A (the command) forks C, which leaves for a group of its own and forks D; D joins A's group and
    // exits. C never waits for it: D stays a zombie in the command's group for as long as C lives, as
    // orphans do under a container's PID 1 that never reaps. perl: perl-base is part of every Debian. C lets
    // go of fencelock's output pipes, or the test would wait for C rather than for fencelock.
    const k = key('zombie')
    const pidFile = join(dir.path, `zombie-${k}`)
    const script = String.raw`
      my $g = getpgrp(0);
      if (fork() == 0) {
        open(STDOUT, '>', '/dev/null'); open(STDERR, '>', '/dev/null');
        setpgrp(0, 0);
        my $d = fork();
        if ($d == 0) { setpgrp(0, $g) or exit 1; exit 0 }
        my $state = '';
        until ($state eq 'Z') {
          select(undef, undef, undef, 0.02);
          open(my $s, '<', "/proc/$d/stat") or next;
          ($state) = (<$s> =~ /\) (\S)/);
        }
        open(my $f, '>', "$ARGV[0].tmp"); print $f "$$ $d $g\n"; close($f);
        rename("$ARGV[0].tmp", $ARGV[0]);
        sleep 600;
        exit 0;
      }
      select(undef, undef, undef, 0.05) until -e $ARGV[0];
      exit 0;`
    const running = fencelock(['run', k, '--', 'perl', '-e', script, pidFile])
    running.catch(() => {})
    let parent: number | undefined
    try {
      await waitUntil(() => existsSync(pidFile), 'the zombie is made', { withinMs: 60_000 })
      const [c, d, g] = readFileSync(pidFile, 'utf8').trim().split(' ').map(Number) as [
        number,
        number,
        number,
      ]
      parent = c
      const outcome = await Promise.race([running, sleep(30_000).then(() => 'still waiting' as const)])
      assert.notEqual(outcome, 'still waiting', 'fencelock still holds the lock for a zombie 30 s on')
      assert.equal((outcome as Result).code, 0, (outcome as Result).stderr)
      // Honest only if the zombie was still there, in the command's group, when fencelock let go.
      const stat = readFileSync(`/proc/${d}/stat`, 'latin1')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      assert.deepEqual([fields[0], Number(fields[2])], ['Z', g])
    } finally {
      if (parent !== undefined) process.kill(parent, 'SIGKILL')
      await running
    }
  })

  it('kills with SIGKILL a command that ignores SIGTERM, after --kill-after', async () => {
    const r = await runThenBreak(key('kill'), ['--kill-after', '300ms'], 'trap "" TERM')
    assert.equal(r.code, 76)
    assert.equal(r.signal, null)
  })
})

describe('usage errors', () => {
  const cases: Array<[string, string[], RegExp, NodeJS.ProcessEnv?]> = [
    ['no command', ['run', 'k'], /put the command after "--"/],
    ['no key', ['run'], /missing <key>/],
    ['unknown option', ['run', 'k', '--bogus', '--', 'true'], /unknown option --bogus/],
    ['misspelled option', ['run', 'k', '--tiemout', '1s', '--', 'true'], /did you mean --timeout\?/],
    ['unknown command', ['frobnicate'], /unknown command "frobnicate"/],
    ['bad duration', ['run', 'k', '--ttl', 'soon', '--', 'true'], /`--ttl`.*"soon"/],
    [
      'unknown scheme',
      ['run', 'k', '--url', 'foo://x', '--', 'true'],
      /unknown lock backend scheme "foo:"; fencelock supports file:\/\/\/var\/lock\/app, redis:\/\/host:6379/,
    ],
    [
      'memory: (one process only)',
      ['run', 'k', '--url', 'memory:', '--', 'true'],
      /memory: locks live inside one process.*use a folder of file locks, e\.g\. --url file:\/\/\/var\/lock\/app/,
    ],
    [
      'memory: from $FENCELOCK_URL',
      ['inspect', 'k'],
      /memory: locks live inside one process/,
      { FENCELOCK_URL: 'memory:x' },
    ],
    ['malformed URL', ['run', 'k', '--url', 'not a url', '--', 'true'], /Expected a backend URL/],
    ['remote file URL', ['inspect', 'k', '--url', 'file://host/dir'], /local file URL/],
  ]
  for (const [name, args, message, env] of cases) {
    it(`${name}: one clear line and exit 64`, async () => {
      const r = await fencelock(args, env)
      assert.equal(r.code, 64)
      assert.match(r.stderr, message)
      assert.equal(r.stderr.trim().split('\n').length, 1)
    })
  }

  it('every command has --help', async () => {
    for (const command of ['run', 'hold', 'inspect', 'doctor']) {
      const r = await fencelock([command, '--help'])
      assert.equal(r.code, 0)
      assert.match(r.stdout, new RegExp(`^Usage: fencelock ${command}`))
    }
    const top = await fencelock(['--help'])
    assert.equal(top.code, 0)
    assert.match(top.stdout, /Exit codes/)
  })

  it("--help lists exactly the registry's schemes but memory:, each with an example, and the default folder", async () => {
    const r = await fencelock(['--help'])
    const lines = r.stdout.split('\nBackends')[1]!.split('\n').slice(1)
    const end = lines.findIndex((line) => !line.startsWith('  '))
    const section = lines.slice(0, end)
    const listed = section.map((line) => line.trim().split(/\s+/)[0]!)
    assert.deepEqual(
      listed.map((example) => new URL(example.replace(/,.*$/, '')).protocol),
      supportedSchemes().filter((scheme) => scheme !== 'memory:'),
    )
    for (const example of listed) assert.doesNotThrow(() => parseBackendUrl(example), example)
    assert.ok(r.stdout.includes(sharedFolder() ?? perUserFolder()), r.stdout)
  })
})

describe('fencelock hold', () => {
  it('says so on stderr for an input line it does not know, and keeps the lock', async () => {
    const k = key('hold-input')
    const child = spawn(process.execPath, [CLI, 'hold', k, '--url', url], { stdio: 'pipe' })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c) => {
      stdout += c
    })
    child.stderr.on('data', (c) => {
      stderr += c
    })
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
    await waitUntil(() => stdout.includes('"acquired"'), 'the acquired line')
    child.stdin.write('relase\n')
    await waitUntil(() => stderr.includes('unknown input'), 'the warning')
    assert.match(stderr, /unknown input "relase"; expected release or abandon/)
    assert.equal(stdout.includes('"released"'), false, 'a typo must not release')
    child.stdin.write('release\n')
    assert.equal(await exited, 0)
    assert.match(stdout, /"released"/)
  })
})

describe('fencelock inspect and doctor', () => {
  it('inspect prints the holder as JSON, using $FENCELOCK_URL', async () => {
    const k = key('inspect')
    const holder = startHold(url, k)
    const acquired = await holder.next('acquired')
    const r = await fencelock(['inspect', k])
    assert.equal(r.code, 0)
    const info = JSON.parse(r.stdout) as Record<string, unknown>
    assert.equal(info.held, true)
    assert.equal(info.owner, acquired.owner)
    assert.equal(info.fence, acquired.fence)
    holder.send('release')
    await holder.exited
  })

  it('doctor checks the file backend', async () => {
    const r = await fencelock(['doctor', url])
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /exclusive create with link\(\) works/)
  })

  it('doctor reports a missing lock folder with the command that makes it, and creates nothing', async () => {
    const missing = join(dir.path, 'never-made', 'locks')
    const r = await fencelock(['doctor', pathToFileURL(missing).href])
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /^warn .*does not exist.*mkdir -p/m)
    assert.equal(existsSync(join(dir.path, 'never-made')), false)
  })

  it('doctor leaves an existing lock folder as it found it, and counts its keys', async () => {
    const root = join(dir.path, 'doctored')
    mkdirSync(root)
    const rootUrl = pathToFileURL(root).href
    const first = await fencelock(['doctor', rootUrl])
    assert.equal(first.code, 0, first.stderr)
    assert.match(first.stdout, /exclusive create with link\(\) works.*probe: doctor wrote and removed/)
    assert.match(first.stdout, /lock names kept: 0 /)
    assert.deepEqual(readdirSync(root), [])
    const ran = await fencelock(['run', 'counted', '--', 'true'], { FENCELOCK_URL: rootUrl })
    assert.equal(ran.code, 0, ran.stderr)
    const before = readdirSync(root).sort()
    const second = await fencelock(['doctor', rootUrl])
    // run's client removed its released key folder at its close: nothing is kept, nothing held.
    assert.match(second.stdout, /lock names kept: 0 .*, 0 of them held/)
    assert.deepEqual(readdirSync(root).sort(), before)
  })

  it('doctor --strict fails on a warning (exit 78), plain doctor does not', async () => {
    // A lock root under the temp folder draws a warning (a tmp cleaner may remove its epochs).
    const plain = await fencelock(['doctor', url])
    assert.equal(plain.code, 0, plain.stderr)
    assert.match(plain.stdout, /^warn /m)
    const strict = await fencelock(['doctor', '--strict', url])
    assert.equal(strict.code, 78, strict.stdout + strict.stderr)
    const help = await fencelock(['doctor', '--help'])
    assert.match(help.stdout, /--strict[\s\S]*78/)
  })
})

/** Resolves once the command under `fencelock run` has printed "started". */
function untilStarted(running: { child: ReturnType<typeof spawn> }): Promise<void> {
  return new Promise<void>((resolve) => {
    running.child.stdout!.on('data', (c: Buffer) => {
      if (c.toString().includes('started')) resolve()
    })
  })
}
