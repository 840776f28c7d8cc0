/**
 * A Lua script as the store runs it (by its SHA, store.ts), and the Lua that the scripts of every
 * primitive share. Each script runs atomically on the server: no other command interleaves, so a check
 * and the write that depends on it are one step.
 */
import { createHash } from 'node:crypto'

export interface Script {
  readonly source: string
  readonly sha: string
}

export const script = (source: string): Script => ({
  source,
  sha: createHash('sha1').update(source).digest('hex'),
})

/**
 * `clock()`: the server's clock in ms (TIME), read once per script and only when a waiter's deadline must
 * be judged: an uncontended fair acquire, and a release with nobody waiting, do without it. Redlock's
 * line scripts use it too.
 */
export const CLOCK = `
local now = false
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
`
