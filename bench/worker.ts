/**
 * One process of scenario bp: runs `workers` contending workers of one adapter for `durationMs` and prints
 * each hold as [worker, grantedAt, releaseStartedAt] on the host's monotonic clock (CLOCK_MONOTONIC, shared
 * by every process), so the parent can merge the holds of all processes on one timeline. It prints `ready`
 * once its lockers are made, then starts at the instant the parent writes on its stdin (the same for all).
 * With `sharedLocker`, the workers are waiters of one locker (one client), as many waiters of one process are.
 * Usage: node worker.js '<json: { adapter, env, key, durationMs, workers, id, sharedLocker? }>'
 */
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Env } from './adapter.js'
import { ADAPTERS } from './adapters.js'

const {
  adapter: name,
  env,
  key,
  durationMs,
  workers,
  id,
  sharedLocker = false,
} = JSON.parse(process.argv[2]!) as {
  adapter: string
  env: Env
  key: string
  durationMs: number
  workers: number
  id: number
  sharedLocker?: boolean
}
const adapter = ADAPTERS.find((a) => a.name === name)
if (!adapter) throw new Error(`no adapter named ${name}`)
const clock = () => Number(process.hrtime.bigint()) / 1e6
const lockers = sharedLocker
  ? Array<Awaited<ReturnType<typeof adapter.createLocker>>>(workers).fill(await adapter.createLocker(env))
  : await Promise.all(Array.from({ length: workers }, () => adapter.createLocker(env)))
const holds: Array<[number, number, number]> = []
let failures = 0
// Start together: every process waits for the same instant on the shared clock.
process.stdout.write('ready\n')
const input = createInterface({ input: process.stdin })
const [line] = (await once(input, 'line')) as [string]
input.close()
const startAt = Number(line)
await sleep(Math.max(0, startAt - clock()))
const stopAt = startAt + durationMs
await Promise.all(
  lockers.map(async (locker, w) => {
    while (clock() < stopAt) {
      let held: Awaited<ReturnType<typeof locker.acquire>>
      try {
        held = await locker.acquire(key)
      } catch {
        failures++
        await sleep(1)
        continue
      }
      const grantedAt = clock()
      await sleep(1)
      const releaseStart = clock()
      holds.push([id * workers + w, grantedAt, releaseStart])
      await held.release()
    }
  }),
)
await Promise.all([...new Set(lockers)].map((l) => l.close()))
process.stdout.write(JSON.stringify({ holds, failures }))
