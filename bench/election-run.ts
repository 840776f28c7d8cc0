/**
 * `node build/bench/election-run.js [--rounds 10] [--ttl 2000] [--settle 1000] [--match text] [--out dir]`:
 * how soon a waiting candidate leads once the leader is gone, on every store that elects, beside etcd3's
 * `Election` and a hand-written ZooKeeper latch (bench/elections.ts), with the same lease or session length
 * (`--ttl`) for every adapter, on the servers the bench starts (bench/env.ts), in one run.
 *
 * A round: a leader campaigns in a child process (election-leader.ts) and says it leads; a candidate campaigns
 * here; after `--settle` ms (time for the candidate to be queued and waiting: a pause, as nothing tells when a
 * peer's campaign is waiting) the leader goes. Two figures per adapter, each over `--rounds` rounds:
 * - kill: SIGKILL to the leader's process → the candidate's campaign resolves. A lease store cannot see a
 *   process die, so the floor is the rest of the dead leader's lease (up to the ttl, since its last renewal);
 *   a store that sees the process die (the file backend, a session's connection reset) can be sooner.
 * - resign: the leader's `resign` begins (its stamp on the host's monotonic clock) → the candidate leads.
 * Prints a table, writes bench/results/election-latest.json. The machine is shared: read ratios.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { arch, cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { Env } from './adapter.js'
import { type Candidate, ELECTION_ADAPTERS, type ElectionAdapter } from './elections.js'
import { startEnv } from './env.js'
import type { Results, Row } from './report.js'
import { percentile } from './stats.js'
import { printTable } from './table.js'

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '10' },
    ttl: { type: 'string', default: '2000' },
    settle: { type: 'string', default: '1000' },
    match: { type: 'string' },
    out: { type: 'string' },
  },
})
const rounds = Number(values.rounds)
const ttlMs = Number(values.ttl)
const settleMs = Number(values.settle)
const match = values.match?.split(',')
const selected = ELECTION_ADAPTERS.filter((a) => !match || match.some((m) => a.name.includes(m)))
if (selected.length === 0) throw new Error(`no election adapter matches ${values.match}`)

const LEADER = fileURLToPath(new URL('./election-leader.js', import.meta.url))
/** A step that does not come within this long fails its round (a lost leader, a stuck store). */
const STEP_MS = 60_000 + 10 * ttlMs
/** The host's monotonic clock (CLOCK_MONOTONIC), the same in the leader's process. */
const clock = () => Number(process.hrtime.bigint()) / 1e6
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')

/** Rejects after `ms`, saying what did not happen; the timer is cleared when `promise` settles. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms)
  })
  return Promise.race([promise, late]).finally(() => clearTimeout(timer))
}

/** Resolves with the first line of `child`'s stdout that starts with `prefix`; rejects when it exits first. */
function line(child: ChildProcess, prefix: string): Promise<string> {
  let all = ''
  let errors = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    errors = (errors + chunk.toString()).slice(-2000)
  })
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      all += chunk.toString()
      const found = all.split('\n').find((l) => l.startsWith(prefix) && all.includes(`${l}\n`))
      if (found !== undefined) resolve(found)
    })
    child.once('exit', (code, signal) =>
      reject(new Error(`the leader exited (${signal ?? code}) before "${prefix}": ${errors.trim()}`)),
    )
  })
}

/**
 * One round: the leader leads in a child, our candidate campaigns and waits `settleMs`, then `end` removes
 * the leader and answers when (on `clock`); returns the ms from then until our candidate leads.
 */
async function round(
  adapter: ElectionAdapter,
  env: Env,
  election: string,
  end: (leader: ChildProcess) => Promise<number>,
): Promise<number> {
  const leader = spawn(
    process.execPath,
    [LEADER, JSON.stringify({ adapter: adapter.name, env, election, ttlMs })],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  )
  const exited = new Promise<void>((resolve) => leader.once('exit', () => resolve()))
  let candidate: Candidate | undefined
  try {
    candidate = await adapter.candidate(env, ttlMs)
    await within(line(leader, 'leading'), STEP_MS, `${adapter.name}: the leader's campaign`)
    let ledAt: number | undefined
    const campaign = candidate.campaign(election).then((won) => {
      ledAt = clock()
      return won
    })
    campaign.catch(() => {})
    await sleep(settleMs)
    if (ledAt !== undefined) throw new Error(`${adapter.name}: the candidate led while the leader lived`)
    const endedAt = await end(leader)
    const won = await within(campaign, STEP_MS, `${adapter.name}: the candidate's campaign`)
    await won.resign()
    return ledAt! - endedAt
  } finally {
    leader.kill('SIGKILL')
    await exited
    await candidate?.close()
  }
}

async function kill(leader: ChildProcess): Promise<number> {
  const at = clock()
  leader.kill('SIGKILL')
  return at
}

async function resign(leader: ChildProcess): Promise<number> {
  const resigning = line(leader, 'resigning ')
  leader.stdin!.write('resign\n')
  return Number((await within(resigning, STEP_MS, 'the resign')).slice('resigning '.length))
}

/** The figures of one adapter (the samples: the kills): `rounds` kills, then `rounds` resigns, each on an election of its own. */
async function measure(adapter: ElectionAdapter, env: Env): Promise<Pick<Row, 'metrics' | 'samples'>> {
  const killed: number[] = []
  const resigned: number[] = []
  for (let i = 0; i < rounds; i++)
    killed.push(await round(adapter, env, `bench-election-${process.pid}-kill-${i}`, kill))
  for (let i = 0; i < rounds; i++)
    resigned.push(await round(adapter, env, `bench-election-${process.pid}-resign-${i}`, resign))
  const metrics = {
    killP50: percentile(killed, 50),
    killP90: percentile(killed, 90),
    killMax: Math.max(...killed),
    killP50PerTtl: percentile(killed, 50) / ttlMs,
    resignP50: percentile(resigned, 50),
    resignP90: percentile(resigned, 90),
    resignMax: Math.max(...resigned),
  }
  return { metrics, samples: killed }
}

const startLoad = loadavg()
const { env, close } = await startEnv(selected)
const rows: Row[] = []
try {
  for (const adapter of selected) {
    process.stderr.write(`  ${adapter.name} (load ${load()})\n`)
    const base = {
      scenario: 'e',
      adapter: adapter.name,
      store: adapter.store,
      kind: adapter.kind,
      fences: adapter.fences,
      ...(adapter.note ? { note: adapter.note } : {}),
    }
    try {
      rows.push({ ...base, ...(await measure(adapter, env)) })
    } catch (error) {
      rows.push({ ...base, metrics: {}, error: (error as Error).message.split('\n')[0]! })
    }
  }
} finally {
  await close()
}

const scenario: Results['scenarios'][number] = {
  id: 'e',
  title: `e — leader killed (SIGKILL) or resigned → the waiting candidate leads, ms; ttl ${ttlMs} ms for every adapter, ${rounds} rounds (load average ${load()})`,
  primary: { metric: 'killP50', lowerIsBetter: true, label: 'kill → new leader' },
  rows,
}
const results: Results = {
  date: new Date().toISOString(),
  machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'} (${arch()}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
  runs: 1,
  command: `election-run ${process.argv.slice(2).join(' ')}`.trim(),
  loadAverage: { start: startLoad, end: loadavg() },
  scenarios: [scenario],
}
printTable(scenario)
const out = values.out ?? fileURLToPath(new URL('../../bench/', import.meta.url))
mkdirSync(join(out, 'results'), { recursive: true })
writeFileSync(join(out, 'results', 'election-latest.json'), `${JSON.stringify(results, null, 2)}\n`)
process.stderr.write(`\nwrote ${join(out, 'results', 'election-latest.json')}\n`)
