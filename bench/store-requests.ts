/**
 * What a store is sent while a bench scenario runs, where the bench can count it: on Redis the requests
 * (MONITOR, whose lines from inside a script have the source "lua": not round trips) and the commands run,
 * on one server or summed over Redlock's five
 * (`INFO commandstats`, which counts those a Lua script runs inside Redis); on PostgreSQL the statements at
 * the bench's proxy. Shared by the semaphore and read-write lock benches, which report per waiter or per
 * grant what this counts.
 */
import { Redis } from 'ioredis'
import type { Env } from './adapter.js'
import { monitorRedis } from './redis-monitor.js'

/** Readings of what the store did since `begin`, by figure; `stop` ends the counting. */
export type Counting = {
  begin(): Promise<void>
  stop(): Promise<{ requests: number; commands?: number }>
  close(): void
}

/** Redis commands run so far on the server at `port`, from `INFO commandstats`: those a Lua script runs inside Redis included. */
async function redisCommandsRun(port: number): Promise<number> {
  const admin = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 })
  try {
    const info = await admin.info('commandstats')
    // Every command's calls but the bench's own (INFO, and CLIENT as a connection opens).
    return [...info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)]
      .filter((m) => m[1] !== 'info' && !m[1]!.startsWith('client'))
      .reduce((sum, m) => sum + Number(m[2]), 0)
  } finally {
    admin.disconnect()
  }
}

/** Starts counting what `store` is sent, where the bench can: undefined on the other stores. */
export function counting(store: string, env: Env): (() => Promise<Counting>) | undefined {
  if (store === 'postgres' && env.postgresStatements) {
    const statements = env.postgresStatements
    return async () => {
      let before = 0
      return {
        begin: async () => {
          before = statements()
        },
        stop: async () => ({ requests: statements() - before }),
        close: () => {},
      }
    }
  }
  // Redlock's five servers are counted together: a request to each is one request.
  const ports = store === 'redis' ? [env.redis] : store === 'redis x5' ? env.redis5 : undefined
  if (ports === undefined) return undefined
  const commandsRun = async () => (await Promise.all(ports.map(redisCommandsRun))).reduce((a, b) => a + b, 0)
  return async () => {
    let requests = 0
    let counting = false
    const monitors = await Promise.all(
      ports.map((port) =>
        monitorRedis(port, (command, source) => {
          if (!counting || source === 'lua') return
          if (command !== 'monitor' && command !== 'info' && command !== 'client') requests++
        }),
      ),
    )
    let before = 0
    return {
      async begin() {
        before = await commandsRun()
        requests = 0
        counting = true
      },
      async stop() {
        const commands = (await commandsRun()) - before
        counting = false
        return { requests, commands }
      },
      close: () => {
        for (const monitor of monitors) monitor.close()
      },
    }
  }
}
