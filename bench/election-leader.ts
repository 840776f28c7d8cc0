/**
 * The leader of one round of the election bench (election-run.ts), in a process of its own so that the
 * runner can kill it: campaigns with one adapter, prints `leading` once it leads, and then either dies by
 * the runner's SIGKILL or, on a `resign` line on its stdin, prints `resigning <t>` (t: the host's monotonic
 * clock, CLOCK_MONOTONIC, shared by every process, in ms) right before it resigns, and exits.
 * Usage: node election-leader.js '<json: { adapter, env, election, ttlMs }>'
 */
import { createInterface } from 'node:readline'
import type { Env } from './adapter.js'
import { ELECTION_ADAPTERS } from './elections.js'

const {
  adapter: name,
  env,
  election,
  ttlMs,
} = JSON.parse(process.argv[2]!) as {
  adapter: string
  env: Env
  election: string
  ttlMs: number
}
const adapter = ELECTION_ADAPTERS.find((a) => a.name === name)
if (!adapter) throw new Error(`no election adapter named ${name}`)
const clock = () => Number(process.hrtime.bigint()) / 1e6
const input = createInterface({ input: process.stdin })
// A closed stdin means the runner is gone: leave rather than lead for ever.
const command = new Promise<string>((resolve) => {
  input.once('line', resolve)
  input.once('close', () => process.exit(1))
})
const candidate = await adapter.candidate(env, ttlMs)
const won = await candidate.campaign(election)
process.stdout.write('leading\n')
const line = await command
if (line !== 'resign') throw new Error(`unknown command ${JSON.stringify(line)}: expected resign`)
process.stdout.write(`resigning ${clock()}\n`)
await won.resign()
await candidate.close()
process.exit(0)
