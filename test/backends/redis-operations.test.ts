/**
 * The Redis backend's `list` and `break` where the conformance case does not reach: listing more locks
 * than one SCAN step holds, keys with odd characters (a brace is hashed into its tag, so its name is
 * recorded), a break aimed at a grant that another has replaced, and waiters woken by a break (plain: the
 * release message; fair: the lock handed to the first waiter by the break itself).
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisBackend } from '../../src/backends/redis/index.js'
import { redisLockKeys } from '../../src/backends/redis/mutex/layout.js'
import { createLockClient, type ListedLock, type LockClient } from '../../src/index.js'
import { type RedisServer, startRedis } from '../servers/redis.js'
import { awaitLater } from '../support/later.js'
import { pollUntil } from '../support/wait.js'

let server: RedisServer
let admin: Redis
const clients: LockClient[] = []
const redises: Redis[] = []
const run = randomBytes(3).toString('hex')
const client = (query = '', options: Parameters<typeof createLockClient>[1] = {}) => {
  const c = createLockClient(`${server.url}${query}`, options)
  clients.push(c)
  return c
}

async function listed(list: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const found: ListedLock[] = []
  for await (const lock of list) found.push(lock)
  return found
}

before(async () => {
  server = await startRedis()
  admin = new Redis(server.port, '127.0.0.1')
})
after(async () => {
  await Promise.all(clients.map((c) => c.close()))
  for (const r of [admin, ...redises]) r.disconnect()
  await server.destroy()
})

describe('redis list', () => {
  it('lists 400 held locks over several SCAN steps, each key exactly as given', async () => {
    // A user client whose SCANs are counted: the listing must take more than one step.
    const redis = new Redis(server.port, '127.0.0.1')
    redises.push(redis)
    let scans = 0
    const scan = redis.scan.bind(redis) as (...args: unknown[]) => Promise<[string, string[]]>
    ;(redis as unknown as { scan: typeof scan }).scan = (...args) => {
      scans++
      return scan(...args)
    }
    const locks = createLockClient(redisBackend({ client: redis }), { ttl: '60s' })
    clients.push(locks)
    const prefix = `ops-${run}/`
    const odd = [`${prefix}a/b c`, `${prefix}Zürich`, `${prefix}{tagged}`, `${prefix}x}{y`]
    const keys = [...odd, ...Array.from({ length: 396 }, (_, i) => `${prefix}n${i}`)]
    for (let i = 0; i < keys.length; i += 50) {
      await Promise.all(keys.slice(i, i + 50).map((k) => locks.acquire(k, { holder: `h ${k}` })))
    }
    const found = await listed(locks.list(prefix))
    assert.deepEqual(found.map((l) => l.key).sort(), [...keys].sort(), 'every held key, once, as given')
    assert.ok(scans >= 2, `the listing took ${scans} SCAN steps`)
    const tagged = found.find((l) => l.key === `${prefix}{tagged}`)
    assert.equal(tagged?.holder, `h ${prefix}{tagged}`)
    assert.equal(tagged?.note, undefined, 'a key with a brace is named by its recorded name')
    // A prefix that only a key with a brace matches: filtered after its name is read.
    assert.deepEqual(
      (await listed(locks.list(`${prefix}{t`))).map((l) => l.key),
      [`${prefix}{tagged}`],
    )
  })

  it('names a key with a brace after a hand-over too (fair mode)', async () => {
    const k = `fair-${run}-{brace}`
    const [holder, waiter, operator] = [client('?fair=true'), client('?fair=true'), client('?fair=true')]
    const first = await holder.acquire(k)
    const next = awaitLater(waiter.acquire(k, { timeout: '30s' }))
    await pollUntil(
      () => admin.llen(redisLockKeys(k).queue),
      (n) => n >= 1,
      { withinMs: 20_000 },
    )
    await admin.del(redisLockKeys(k).name!)
    await first.release()
    const second = await next
    assert.deepEqual(
      (await listed(operator.list(`fair-${run}`))).map((l) => [l.key, l.owner]),
      [[k, second.owner]],
    )
    await second.release()
  })
})

describe('redis break', () => {
  it('keeps the fence key as long as a lease renewed past its hour, so a break aimed at it finds it', async () => {
    const k = `long-${run}`
    const [holder, operator] = [client('', { ttl: '60s' }), client()]
    const lock = await holder.acquire(k)
    // As if the lock had been renewed for an hour: its fence key is about to expire.
    await admin.pexpire(redisLockKeys(k).fence, 1000)
    await lock.extend('60s')
    const left = await admin.pttl(redisLockKeys(k).fence)
    assert.ok(left > 30_000, `the fence key expires in ${left} ms, before the lease`)
    const broken = await operator.break(k, { fence: lock.fence })
    assert.equal(broken.broken, true)
  })

  for (const fair of [false, true]) {
    const query = fair ? '?fair=true' : ''
    const mode = fair ? 'fair' : 'plain'

    it(`${mode}: a break aimed at an expired grant leaves the grant that replaced it`, async () => {
      const k = `aimed-${mode}-${run}`
      const [first, second, operator] = [client(query), client(query), client(query)]
      const old = await first.acquire(k)
      // The old holder's lease ends behind its back (as an expiry would), and another takes the key.
      await admin.del(redisLockKeys(k).lock)
      const taken = await second.acquire(k, { timeout: '30s' })
      assert.ok(taken.fence > old.fence)
      const aimed = await operator.break(k, { fence: old.fence })
      assert.equal(aimed.broken, false)
      assert.equal(aimed.lease?.fence, taken.fence)
      assert.equal(aimed.lease?.owner, taken.owner)
      assert.equal((await operator.inspect(k)).owner, taken.owner, 'the new grant still holds')
      const exact = await operator.break(k, { fence: taken.fence })
      assert.equal(exact.broken, true, 'a break aimed at the current grant ends it')
      assert.equal((await operator.inspect(k)).held, false)
    })
  }

  it('plain: a break publishes the release message, so waiters wake at once', async () => {
    const k = `wake-plain-${run}`
    const holder = client('', { ttl: '60s' })
    const stuck = await holder.acquire(k)
    const sub = new Redis(server.port, '127.0.0.1')
    redises.push(sub)
    const heard: string[] = []
    sub.on('message', (_channel: string, message: string) => heard.push(message))
    await sub.subscribe(redisLockKeys(k).channel)
    assert.equal((await client().break(k)).broken, true)
    await pollUntil(
      async () => heard,
      (messages) => messages.includes(`-${stuck.owner}`),
      { withinMs: 20_000 },
    )
  })

  it('fair: a break hands the lock to the first waiter on the server, as a release does', async () => {
    const k = `wake-fair-${run}`
    const [holder, waiter, operator] = [client('?fair=true', { ttl: '60s' }), client('?fair=true'), client()]
    const stuck = await holder.acquire(k)
    const next = awaitLater(waiter.acquire(k, { timeout: '60s' }))
    await pollUntil(
      () => admin.llen(redisLockKeys(k).queue),
      (n) => n >= 1,
      { withinMs: 20_000 },
    )
    const queuedOwner = await admin.lindex(redisLockKeys(k).queue, 0)
    const broken = await client('?fair=true').break(k)
    assert.equal(broken.lease?.owner, stuck.owner)
    // Handed over inside the break's script: the waiter holds it before it even hears of it.
    assert.equal((await operator.inspect(k)).owner, queuedOwner)
    const taken = await next
    assert.ok(taken.fence > stuck.fence)
    await taken.release()
  })
})
