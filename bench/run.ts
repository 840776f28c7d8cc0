/**
 * `npm run bench [-- --runs N] [--only a,b] [--match text] [--out dir]`: fencelock beside the peer libraries and raw
 * floors, on real servers started by the test harness, in one run. Prints a table per scenario with a
 * `fencelock / best peer` ratio, writes bench/results/latest.json and bench/report.html.
 * Machines here are shared and noisy: read ratios from one run, never a lone absolute number.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { arch, cpus, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { KITS, type KitStore, kit } from '../test/kits/index.js'
import { loopback } from '../test/kits/kit.js'
import { useLocalCredentials } from '../test/servers/dynamodb.js'
import { tempDir } from '../test/support/temp.js'
import type { Env } from './adapter.js'
import { ADAPTERS } from './adapters.js'
import { countStatements } from './postgres.js'
import { type Results, type Row, writeReport } from './report.js'
import { type Figures, SCENARIOS } from './scenarios.js'
import { fmt } from './stats.js'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '1' },
    only: { type: 'string' },
    match: { type: 'string' },
    out: { type: 'string' },
  },
})
const runs = Math.max(1, Number(values.runs))
const only = values.only?.split(',')
/** Adapters whose name contains any of these (comma-separated). */
const match = values.match?.split(',')

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

// Credentials first, before any kit sets its own with `??=`: DynamoDB Local refuses an access key id that is
// not letters and digits, and the S3 and GCS test servers take any.
useLocalCredentials()
const dir = tempDir('bench')
/** Adapters `--match` selects (all without it). */
const selected = ADAPTERS.filter((a) => !match || match.some((m) => a.name.includes(m)))
/**
 * The kits' stores: one per kit with bench adapters on a store some selected adapter runs on (so a run
 * matched to a few adapters starts no JVM it does not need), shared by its adapters and the peers of that store
 * (scenario h counts a blocked waiter's commands on the Redis server), plus one of its own for a variant
 * that asks for it (fsync=false gets a folder of its own).
 */
const stores: KitStore[] = []
const startStore = async (id: string, label: string) => {
  const store = await kit(id).start({ dir: join(dir.path, label) })
  stores.push(store)
  return store
}
const urls: Record<string, string> = {}
const shared = new Map<string, KitStore>()
const wanted = new Set(selected.map((a) => a.store))
for (const k of KITS.filter((k) => k.bench?.some((v) => wanted.has(v.store)))) {
  shared.set(k.id, await startStore(k.id, k.id))
  for (const [i, v] of k.bench!.entries()) {
    const store = v.separate ? await startStore(k.id, `${k.id}-${i}`) : shared.get(k.id)!
    urls[v.name] = store.url(v.query)
  }
}
// PostgreSQL: every client (fencelock's too) goes through a proxy that counts the statements sent
// (scenario h counts a blocked waiter's).
const pg = shared.get('postgres')
const pgCounter = pg ? await countStatements(pg.ports[0]!) : undefined
if (pg && pgCounter) {
  for (const v of kit('postgres').bench ?? []) urls[v.name] = pg.urlVia!([pgCounter.port], v.query)
}
/** The shared store of the kit whose bench variants run on `store` (its id need not be the store's name). */
const storeOf = (store: string) => {
  const k = KITS.find((k) => shared.has(k.id) && k.bench?.some((v) => v.store === store))
  return k && shared.get(k.id)
}
// The peers' stores: the same servers fencelock runs on (0 or empty where no selected adapter needs one).
const env: Env = {
  postgres: pg && pgCounter ? pg.urlVia!([pgCounter.port]) : '',
  ...(pgCounter ? { postgresStatements: () => pgCounter.count() } : {}),
  redis: shared.get('redis')?.ports[0] ?? 0,
  redis5: [...(shared.get('redlock-5')?.ports ?? [])],
  dir: dir.path,
  etcd: `127.0.0.1:${shared.get('etcd')?.ports[0] ?? 0}`,
  urls,
  endpoints: Object.fromEntries(
    ['s3', 'gcs', 'dynamodb']
      .filter((id) => shared.has(id))
      .map((id) => [id, `http://127.0.0.1:${shared.get(id)!.ports[0]}`]),
  ),
  zookeeper: loopback(storeOf('zookeeper')?.ports ?? []),
}
const results: Results = {
  date: new Date().toISOString(),
  machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'} (${arch()}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
  runs,
  scenarios: [],
}

try {
  for (const scenario of SCENARIOS) {
    if (only && !only.includes(scenario.id)) continue
    const adapters = selected.filter((a) => scenario.applies(a))
    const figures = new Map<string, Figures[]>()
    const errors = new Map<string, string>()
    for (let run = 0; run < runs; run++) {
      // Rotate the order each run, so drift in the machine's load does not favour whoever goes first.
      const order = adapters.map((_, i) => adapters[(i + run) % adapters.length]!)
      for (const adapter of order) {
        process.stderr.write(`  ${scenario.id} run ${run + 1}/${runs}: ${adapter.name}\n`)
        try {
          // A peer whose acquire never returns (redlock@5 under contention did) must not stall the whole
          // run: after this long the adapter's figure is an error, and the run goes on.
          let timer: NodeJS.Timeout | undefined
          const f = await Promise.race([
            scenario.run(adapter, env),
            new Promise<never>((_, reject) => {
              timer = setTimeout(() => reject(new Error('did not finish within 3 minutes')), 180_000)
            }),
          ]).finally(() => clearTimeout(timer))
          figures.set(adapter.name, [...(figures.get(adapter.name) ?? []), f])
        } catch (error) {
          errors.set(adapter.name, (error as Error).message)
        }
      }
    }
    const rows: Row[] = adapters.map((a) => {
      const fs = figures.get(a.name) ?? []
      const metrics: Record<string, number> = {}
      for (const name of Object.keys(fs[0]?.metrics ?? {}))
        metrics[name] = median(fs.map((f) => f.metrics[name]!))
      const last = fs.at(-1)
      return {
        scenario: scenario.id,
        adapter: a.name,
        store: a.store,
        kind: a.kind,
        fences: a.fences,
        ...(a.note ? { note: a.note } : {}),
        metrics,
        ...(last?.perWorker ? { perWorker: last.perWorker } : {}),
        ...(last?.samples ? { samples: last.samples } : {}),
        ...(errors.has(a.name) && fs.length === 0 ? { error: errors.get(a.name)! } : {}),
      }
    })
    results.scenarios.push({ id: scenario.id, title: scenario.title, primary: scenario.primary, rows })
    printTable(results.scenarios.at(-1)!)
  }
} finally {
  await pgCounter?.close()
  await Promise.all(stores.map((store) => store.close()))
  dir.cleanup()
}

const out = values.out ?? fileURLToPath(new URL('../../bench/', import.meta.url))
mkdirSync(join(out, 'results'), { recursive: true })
writeFileSync(join(out, 'results', 'latest.json'), `${JSON.stringify(results, null, 2)}\n`)
writeReport(results, join(out, 'report.html'))
process.stderr.write(`\nwrote ${join(out, 'results', 'latest.json')} and ${join(out, 'report.html')}\n`)

/** The ratio of a fencelock row to the best peer on the same store, on the scenario's primary figure. */
export function ratio(
  row: Row,
  rows: Row[],
  primary: { metric: string; lowerIsBetter: boolean },
  against: Row['kind'] = 'peer',
): number | undefined {
  if (row.kind !== 'fencelock') return undefined
  const peers = rows.filter(
    (r) => r.kind === against && r.store === row.store && r.metrics[primary.metric] !== undefined,
  )
  const values = peers.map((p) => p.metrics[primary.metric]!).filter(Number.isFinite)
  if (values.length === 0 || row.metrics[primary.metric] === undefined) return undefined
  const best = primary.lowerIsBetter ? Math.min(...values) : Math.max(...values)
  return row.metrics[primary.metric]! / best
}

function printTable(s: Results['scenarios'][number]): void {
  const metricNames = [...new Set(s.rows.flatMap((r) => Object.keys(r.metrics)))]
  const better = s.primary.lowerIsBetter ? 'lower is better' : 'higher is better'
  console.log(`\n### ${s.title}\n`)
  console.log(
    `| adapter | store | fence | ${metricNames.join(' | ')} | fencelock / best peer (${s.primary.label}, ${better}) | fencelock / floor |`,
  )
  console.log(`|---|---|---|${metricNames.map(() => '---|').join('')}---|---|`)
  for (const row of s.rows) {
    const r = ratio(row, s.rows, s.primary)
    const f = ratio(row, s.rows, s.primary, 'floor')
    const cells = metricNames.map((m) => {
      const v = row.metrics[m]
      return v === undefined
        ? row.error
          ? 'error'
          : ''
        : fmt(v, m.startsWith('p') || m.startsWith('handoff') ? 3 : 2)
    })
    console.log(
      `| ${row.adapter}${row.error ? ` (${row.error.slice(0, 60)})` : ''} | ${row.store} | ${row.fences ? 'yes' : 'no'} | ${cells.join(' | ')} | ${r === undefined ? '' : `${fmt(r, 2)}×`} | ${f === undefined ? '' : `${fmt(f, 2)}×`} |`,
    )
  }
}
