/**
 * `node build/bench/cycle-cpu.js [--cycles 20000] [--rounds 5]`: client CPU per uncontended
 * acquire+release cycle, fencelock on memory and on Redis beside the hand-written fenced floor (one script
 * each way, bench/adapters.ts), in one process on one Redis server. The three take turns in rounds, so a
 * change of the machine's load falls on all of them; each row is the median round's CPU (user + system,
 * `process.cpuUsage`) per cycle, not wall time: the machine is shared. Prints the load average beside it.
 */
import { loadavg } from 'node:os'
import { parseArgs } from 'node:util'
import { createLockClient } from '../src/index.js'
import { startRedis } from '../test/servers/redis.js'
import type { Locker } from './adapter.js'
import { ADAPTERS } from './adapters.js'

const { values } = parseArgs({
  options: {
    cycles: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '5' },
  },
})
const cycles = Number(values.cycles)
const rounds = Number(values.rounds)
const perRound = Math.ceil(cycles / rounds)

/** CPU µs per cycle of `count` sequential acquire+release cycles of `locker`, each on its own key. */
async function cpuPerCycle(locker: Locker, count: number, round: number): Promise<number> {
  const started = process.cpuUsage()
  for (let i = 0; i < count; i++) {
    const lock = await locker.acquire(`cycle-${round}-${i % 1000}`)
    await lock.release()
  }
  const used = process.cpuUsage(started)
  return (used.user + used.system) / count
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const server = await startRedis()
const floor = ADAPTERS.find((a) => a.kind === 'floor' && a.store === 'redis' && a.fences && !a.waits)
if (!floor) throw new Error('no fenced Redis floor in bench/adapters.ts')
const env = { redis: server.port } as Parameters<typeof floor.createLocker>[0]
const memory = createLockClient('memory:', { ttl: 30_000, renew: false })
const redis = createLockClient(server.url, { ttl: 30_000, renew: false })
const rows: Array<[string, Locker]> = [
  ['fencelock memory', { acquire: (key) => memory.acquire(key), close: () => memory.close() }],
  ['fencelock redis', { acquire: (key) => redis.acquire(key), close: () => redis.close() }],
  [floor.name, await floor.createLocker(env)],
]
try {
  const figures = new Map<string, number[]>(rows.map(([name]) => [name, []]))
  // A warm-up round each (compilation, connections, script loading), not counted.
  for (const [, locker] of rows) await cpuPerCycle(locker, Math.min(perRound, 2000), -1)
  for (let round = 0; round < rounds; round++) {
    for (const [name, locker] of rows) figures.get(name)!.push(await cpuPerCycle(locker, perRound, round))
  }
  console.log(
    `${cycles} cycles in ${rounds} rounds; load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  )
  for (const [name, xs] of figures) {
    console.log(
      `${name.padEnd(40)} ${median(xs).toFixed(1).padStart(6)} µs CPU/cycle (rounds ${xs.map((x) => x.toFixed(0)).join(' ')})`,
    )
  }
} finally {
  for (const [, locker] of rows) await locker.close()
  await server.destroy()
}
