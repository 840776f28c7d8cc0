/**
 * Redlock's storage once names are no longer used: a name keeps nothing on any node after its last hold
 * (released or expired), while its next grant, on any majority, still gets a larger fence (the node's
 * counter, one for every name).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { createLockClient, type LockClient } from '../../src/index.js'
import { type RedisNodes, startRedisNodes } from '../servers/redis.js'
import { sleep } from '../support/time.js'
import { pollUntil } from '../support/wait.js'

/** The keys under `prefix` on the server at `port`, but the node's own (`<prefix>!…`: counter, markers). */
async function nameKeys(port: number, prefix: string): Promise<string[]> {
  const admin = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 0 })
  try {
    const keys: string[] = []
    let cursor = '0'
    do {
      const [next, page] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
      keys.push(...page.filter((k) => !k.startsWith(`${prefix}!`)))
      cursor = next
    } while (cursor !== '0')
    return keys
  } finally {
    admin.disconnect()
  }
}

describe('redlock: what a name keeps once it is no longer used (3 nodes)', { timeout: 120_000 }, () => {
  let nodes: RedisNodes
  const open: LockClient[] = []
  const client = (prefix: string, ttl = 1000, renew = true) => {
    const made = createLockClient(nodes.url(`?restartDelay=0&prefix=${prefix}`), { ttl, renew })
    open.push(made)
    return made
  }
  before(async () => {
    nodes = await startRedisNodes(3)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await nodes.destroy()
  })

  it('keeps no key of a name on any node once its holds are released or expired', async () => {
    const prefix = 'retire-a:'
    const locks = client(prefix)
    for (let i = 0; i < 40; i++) await (await locks.acquire(`name-${i}`, { holder: 'worker' })).release()
    // Held, never released: it ends by its ttl on every node. A key with a brace keeps a name record.
    await client(prefix, 1000, false).acquire('abandoned')
    const braced = await locks.acquire('braced-{x}')
    await braced.release()
    await sleep(1000)
    for (const server of nodes.servers) {
      const left = await pollUntil(
        () => nameKeys(server.port, prefix),
        (keys) => keys.length === 0,
        { withinMs: 10_000, everyMs: 200 },
      )
      assert.deepEqual(left, [], `keys left on node ${server.port}`)
    }
  })

  it("gives a retired name's next grant a larger fence, also on a majority without the node that minted it", async () => {
    const prefix = 'retire-b:'
    const locks = client(prefix, 10_000)
    const first = await locks.acquire('k')
    await first.release()
    // The release reaches the last node a moment after the majority that confirmed it.
    for (const server of nodes.servers) {
      const left = await pollUntil(
        () => nameKeys(server.port, prefix),
        (keys) => keys.length === 0,
      )
      assert.deepEqual(left, [], `keys left on node ${server.port}`)
    }
    const second = await locks.acquire('k')
    assert.ok(second.fence > first.fence, `${second.fence} after ${first.fence}`)
    await second.release()
    // Without the node that minted the token, the others (written back to it, or past it) mint more.
    const minter = nodes.servers[Number(second.fence & 0xffn)]!
    await minter.stop()
    try {
      const third = await locks.acquire('k', { timeout: '10s' })
      assert.ok(third.fence > second.fence, `${third.fence} after ${second.fence}`)
      await third.release()
    } finally {
      await minter.restart()
    }
  })
})
