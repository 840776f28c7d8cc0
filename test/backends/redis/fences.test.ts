/**
 * The Redis fence never goes back, case by case, on real servers: a restart that loads an older snapshot,
 * a failover to a replica that lags, a restart that kept nothing, the fence key deleted (or evicted) while
 * the lock lives, a name retired (its fence key expired) and used again, grants back to back, and an
 * earlier version's grants on the same name during an upgrade. MINT in src/backends/redis/mutex/scripts.ts
 * says why each holds.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisBackend } from '../../../src/backends/redis/index.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { createLockClient, type LockClient, LockNotAcquiredError } from '../../../src/index.js'
import { crashRedis } from '../../kits/redis.js'
import { type RedisServer, startRedis } from '../../servers/redis.js'
import { sleep } from '../../support/time.js'
import { pollUntil } from '../../support/wait.js'

const servers: RedisServer[] = []
const connections: Redis[] = []
const clients: LockClient[] = []
const key = (label: string) => `fences-${label}-${randomBytes(3).toString('hex')}`

async function server(args: string[] = []): Promise<RedisServer> {
  const started = await startRedis({ args })
  servers.push(started)
  return started
}
function connect(port: number): Redis {
  const redis = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 3 })
  redis.on('error', () => {})
  connections.push(redis)
  return redis
}
function client(url: string): LockClient {
  const locks = createLockClient(url, { renew: false })
  clients.push(locks)
  return locks
}
/** `cycles` acquire-and-release cycles of `k`; the fences granted, in order. */
async function cycle(locks: LockClient, k: string, cycles: number): Promise<bigint[]> {
  const fences: bigint[] = []
  for (let i = 0; i < cycles; i++) {
    const lock = await locks.acquire(k, { timeout: '10s' })
    fences.push(lock.fence)
    await lock.release()
  }
  return fences
}
const highest = (fences: bigint[]) => fences.reduce((a, b) => (b > a ? b : a), 0n)

after(async () => {
  await Promise.all(clients.map((c) => c.close()))
  for (const c of connections) c.disconnect()
  await Promise.all(servers.map((s) => s.destroy()))
})

describe('redis fences: the stored counter rolled back', () => {
  it('a restart that loads an older snapshot: the next fence is above every fence granted', async () => {
    // A crash after a snapshot (RDB, or an AOF fsynced every second) restores the fence key as it was
    // then: live, and behind the fences granted since.
    const redis = await server()
    const admin = connect(redis.port)
    const k = key('snapshot')
    const before = await cycle(client(redis.url), k, 1)
    await admin.save()
    const since = await cycle(client(redis.url), k, 3)
    await crashRedis(redis)
    assert.equal(
      await connect(redis.port).get(redisLockKeys(k).fence),
      before[0]!.toString(),
      'the snapshot brought back the older counter',
    )
    const [next] = await cycle(client(redis.url), k, 1)
    assert.ok(next! > highest(since), `fence ${next} after ${highest(since)} was granted`)
  })

  it('a failover to a replica that lags: the next fence is above every fence the old primary granted', async () => {
    const primary = await server()
    const replica = await server(['--replicaof', '127.0.0.1', String(primary.port)])
    const k = key('failover')
    const [first] = await cycle(client(primary.url), k, 1)
    const copy = connect(replica.port)
    const seen = await pollUntil(
      () => copy.get(redisLockKeys(k).fence),
      (value) => value === first!.toString(),
      { withinMs: 20_000, everyMs: 50 },
    )
    assert.equal(seen, first!.toString(), 'the replica caught up with the first grant')
    // Replication stops here (a partition, a lagging link); the primary grants on, then dies and the
    // replica is promoted.
    await copy.replicaof('NO', 'ONE')
    const lost = await cycle(client(primary.url), k, 3)
    const [next] = await cycle(client(replica.url), k, 1)
    assert.ok(next! > highest(lost), `fence ${next} after ${highest(lost)} was granted`)
  })

  it('a restart that kept nothing: the next fence is above every fence granted', async () => {
    const redis = await server()
    const k = key('empty-restart')
    const granted = await cycle(client(redis.url), k, 3)
    await crashRedis(redis)
    assert.equal(await connect(redis.port).exists(redisLockKeys(k).fence), 0)
    const [next] = await cycle(client(redis.url), k, 1)
    assert.ok(next! > highest(granted), `fence ${next} after ${highest(granted)}`)
  })
})

describe('redis fences: the fence key gone while the server runs', () => {
  it('the fence key deleted or evicted while the lock is held: the next holder gets a larger fence', async () => {
    const redis = await server()
    const admin = connect(redis.port)
    const locks = client(redis.url)
    const k = key('evicted')
    await cycle(locks, k, 2)
    const held = await locks.acquire(k)
    await admin.del(redisLockKeys(k).fence)
    await held.release()
    const [next] = await cycle(locks, k, 1)
    assert.ok(next! > held.fence, `fence ${next} after ${held.fence}`)
  })

  it('a name retired (its fence key expired) after grants back to back, then used again', async () => {
    const redis = await server()
    const admin = connect(redis.port)
    const k = key('retired')
    // Grants as fast as the server runs them: one connection, every script sent before any reply.
    const backend = redisBackend({ client: connect(redis.port) })
    const live = new AbortController().signal
    const owners = Array.from({ length: 400 }, () => randomBytes(16).toString('hex'))
    const attempts = owners.map((owner) => {
      const granted = backend.tryAcquire({ key: k, owner, ttlMs: 30_000 }, live)
      const released = backend.release({ key: k, owner, fence: 0n, cookie: undefined }, live)
      return Promise.all([granted, released])
    })
    const fences = (await Promise.all(attempts)).flatMap(([r]) => (r.granted ? [r.fence] : []))
    const [seconds = 0, micros = 0] = await admin.time()
    const clock = BigInt(seconds) * 1_000_000n + BigInt(micros)
    assert.ok(fences.length > owners.length / 2, `${fences.length} of ${owners.length} granted`)
    assert.equal(new Set(fences).size, fences.length, 'no fence granted twice')
    assert.ok(highest(fences) <= clock, `fence ${highest(fences)} ran ahead of the server clock ${clock}`)
    await admin.pexpire(redisLockKeys(k).fence, 1)
    await pollUntil(
      () => admin.exists(redisLockKeys(k).fence),
      (n) => n === 0,
    )
    const [next] = await cycle(client(redis.url), k, 1)
    assert.ok(next! > highest(fences), `fence ${next} after ${highest(fences)}`)
  })
})

describe('redis fences: the fence key gone while the lock is held, and a lost reply', () => {
  const live = new AbortController().signal

  for (const fair of [false, true]) {
    it(`a retried attempt finds its lock without a fence key: a fresh fence, above the last${fair ? ' (fair)' : ''}`, async () => {
      // The first attempt's reply was lost (the core never heard its fence), then the fence key was evicted.
      const redis = await server()
      const admin = connect(redis.port)
      const k = key(fair ? 'retry-fair' : 'retry')
      const earlier = highest(await cycle(client(`${redis.url}${fair ? '?fair=true' : ''}`), k, 2))
      const backend = redisBackend({ client: connect(redis.port), fair })
      const req = { key: k, owner: randomBytes(16).toString('hex'), ttlMs: 30_000 }
      const first = await backend.tryAcquire(req, live)
      assert.ok(first.granted && first.fence > earlier)
      await admin.del(redisLockKeys(k).fence)
      const retry = await backend.tryAcquire(req, live)
      assert.ok(retry.granted, 'the retry recognises its own lock')
      assert.ok(retry.fence > first.fence, `fence ${retry.fence} after ${first.fence}`)
      assert.equal(await admin.get(redisLockKeys(k).fence), retry.fence.toString())
    })
  }

  it('a read-back that finds our lock without a fence key grants nothing; the retry gets a fresh fence', async () => {
    const redis = await server()
    const admin = connect(redis.port)
    const k = key('readback')
    const earlier = highest(await cycle(client(redis.url), k, 2))
    const owner = randomBytes(16).toString('hex')
    const own = connect(redis.port)
    let lose = false
    // The attempt runs on the server, the fence key is evicted, and the attempt's reply is lost.
    const lossy = new Proxy(own, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target)
        if (prop !== 'evalsha') return typeof value === 'function' ? value.bind(target) : value
        return async (...args: unknown[]) => {
          const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
          if (lose && args.includes(owner)) {
            lose = false
            await admin.del(redisLockKeys(k).fence)
            throw new Error('Connection is closed.')
          }
          return result
        }
      },
    })
    const backend = redisBackend({ client: lossy as Redis })
    await backend.tryAcquire({ key: key('warm'), owner: 'warm', ttlMs: 1000 }, live)
    lose = true
    const req = { key: k, owner, ttlMs: 30_000 }
    const lost = await backend.tryAcquire(req, live).then(
      (result) => (result.granted ? result.fence : undefined),
      () => undefined,
    )
    assert.equal(lost, undefined, `granted with fence ${lost} while the key kept none (earlier ${earlier})`)
    const retry = await backend.tryAcquire(req, live)
    assert.ok(
      retry.granted && retry.fence > earlier,
      `fence ${retry.granted && retry.fence} after ${earlier}`,
    )
  })
})

describe('redis fences: an earlier version on the same name', () => {
  // The earlier version's grant (its ACQUIRE without the starvation mark): the owner id alone in the lock
  // key, the description in …:holder, and a fence of max(server clock in µs, last + 1).
  const OLDER_ACQUIRE = `
if redis.call('GET', KEYS[1]) then return {0, redis.call('PTTL', KEYS[1])} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[2])
local t = redis.call('TIME')
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last >= fence then fence = last + 1 end
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', math.max(3600000, tonumber(ARGV[2])))
return {1, fence}`
  const OLDER_RELEASE = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2]) return 1`

  it('grants of both versions, taking turns, get rising fences', async () => {
    const redis = await server()
    const admin = connect(redis.port)
    const locks = client(redis.url)
    const k = key('upgrade')
    const keys = redisLockKeys(k)
    const fences: bigint[] = []
    for (let turn = 0; turn < 6; turn++) {
      if (turn % 2 === 0) {
        fences.push(...(await cycle(locks, k, 2)))
        continue
      }
      const owner = randomBytes(16).toString('hex')
      const [granted, fence] = (await admin.eval(
        OLDER_ACQUIRE,
        3,
        keys.lock,
        keys.fence,
        keys.holder,
        owner,
        20_000,
        'older',
      )) as [number, number]
      assert.equal(granted, 1)
      fences.push(BigInt((await admin.get(keys.fence)) ?? fence))
      // Held by the earlier version: refused by this one.
      await assert.rejects(locks.acquire(k, { timeout: '0' }), LockNotAcquiredError)
      assert.equal(await admin.eval(OLDER_RELEASE, 2, keys.lock, keys.holder, owner), 1)
      await sleep(1)
    }
    for (let i = 1; i < fences.length; i++)
      assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} after ${fences[i - 1]} (turn ${i})`)
  })
})
