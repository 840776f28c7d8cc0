/**
 * The semaphore bench's hand-written floors for the slots layout (`layout: 'slots'`: `limit` exclusive
 * slots, each an ordinary lock), the least work a store allows for it: on Redlock, and on the
 * conditional-write family (S3, GCS, DynamoDB), measured on S3. Kept apart from semaphore-floors.ts,
 * whose floors count permits.
 */
import { randomInt } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import * as s3 from '@aws-sdk/client-s3'
import { Redis } from 'ioredis'
import { permitId } from './semaphore-floors.js'
import type { SemaphoreAdapter } from './semaphores.js'

/** One connection to each Redis server of `ports`. */
export const redisNodes = (ports: readonly number[]) =>
  ports.map((port) => new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 }))

/** Free slots first, from a random start, so that contenders spread over the slots (as fencelock does). */
function fromRandomStart(limit: number): number[] {
  const start = randomInt(limit)
  return Array.from({ length: limit }, (_, i) => (start + i) % limit)
}

/** A floor's wait between two rounds over the slots: redis-semaphore's retry interval. */
const RETRY_MS = 10

/** Deletes a key only while it still holds this contender's value. */
const DELETE_IF_OURS = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

/**
 * Redlock: slot i is one key on every node, taken by `SET NX PX` on a majority (the Redlock recipe, per
 * slot); a slot taken on fewer nodes, or after its lease has run out, is given back at once. A round tries
 * every slot; a waiter tries again every 10 ms. Never more than `limit` holders, since each slot's
 * majority is held by one contender at a time. No fence, no renewal, no line.
 */
const redlockSlotsFloor: SemaphoreAdapter = {
  name: 'raw floor: redlock slots, SET NX PX on a majority',
  store: 'redis x5',
  kind: 'floor',
  note: 'limit keys, each SET NX PX on all 5 nodes, granted on 3; DEL-if-ours (Lua) to give back and release; a round over the slots every 10 ms',
  async contender(env, ttlMs) {
    const nodes = redisNodes(env.redis5)
    const quorum = Math.floor(nodes.length / 2) + 1
    const giveBack = (key: string, id: string) =>
      Promise.all(nodes.map((n) => n.eval(DELETE_IF_OURS, 1, key, id).catch(() => 0)))
    /** Takes `key` on a majority within its lease, or gives back what it took. */
    const take = async (key: string, id: string) => {
      const began = Date.now()
      const set = await Promise.all(nodes.map((n) => n.set(key, id, 'PX', ttlMs, 'NX').catch(() => null)))
      if (set.filter((r) => r === 'OK').length >= quorum && Date.now() - began < ttlMs) return true
      await giveBack(key, id)
      return false
    }
    return {
      async acquire(name, limit) {
        const id = permitId()
        for (;;) {
          for (const slot of fromRandomStart(limit)) {
            const key = `bench-slot-floor:${name}:${slot}`
            if (await take(key, id)) return { release: async () => void (await giveBack(key, id)) }
          }
          await sleep(RETRY_MS)
        }
      },
      close: async () => {
        for (const node of nodes) node.disconnect()
      },
    }
  },
}

/** What the bench's S3 kit uses (test/kits/s3.ts). */
const BUCKET = 'fencelock-tests'

/** A conditional request the store refused: another contender's write came first. */
const lostRace = (error: unknown) => {
  const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode
  return status === 412 || status === 409
}

/**
 * The conditional-write family, on S3: slot i is one object, taken by a create-if-absent (`If-None-Match:
 * *`) and released by a delete of the version this contender wrote (`If-Match` its ETag). A waiter lists
 * the semaphore's objects once per poll (one request, as fencelock's slots wait) and tries the slots the
 * listing shows free. No expiry of a dead holder's slot, no fence, no line: the store's cost of the
 * exclusion alone. Never more than `limit` holders, since an object is created once.
 */
const s3SlotsFloor: SemaphoreAdapter = {
  name: 'raw floor: s3 slots, create If-None-Match / delete If-Match',
  store: 's3',
  kind: 'floor',
  note: 'limit objects: PutObject If-None-Match * to take, DeleteObject If-Match its ETag to release; a waiter lists the prefix every 10 ms and tries the free slots; no expiry',
  async contender(env) {
    const endpoint = env.endpoints.s3
    if (endpoint === undefined) throw new Error('no s3 store was started')
    const client = new s3.S3Client({ endpoint, forcePathStyle: true, region: 'us-east-1' })
    /** The ETag of the object made, or undefined when another contender holds the slot. */
    const take = async (key: string) => {
      try {
        const made = await client.send(
          new s3.PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'held', IfNoneMatch: '*' }),
        )
        return made.ETag!
      } catch (error) {
        if (lostRace(error)) return undefined
        throw error
      }
    }
    return {
      async acquire(name, limit) {
        const prefix = `bench-slot-floor/${name}/`
        let held = new Set<string>()
        for (;;) {
          for (const slot of fromRandomStart(limit)) {
            const key = `${prefix}${slot}`
            if (held.has(key)) continue
            const etag = await take(key)
            if (etag !== undefined)
              return {
                release: async () =>
                  void (await client.send(
                    new s3.DeleteObjectCommand({ Bucket: BUCKET, Key: key, IfMatch: etag }),
                  )),
              }
          }
          await sleep(RETRY_MS)
          const listed = await client.send(new s3.ListObjectsV2Command({ Bucket: BUCKET, Prefix: prefix }))
          held = new Set((listed.Contents ?? []).map((o) => o.Key!))
        }
      },
      close: async () => client.destroy(),
    }
  },
}

/** The slots floors, by store. */
export const SLOTS_FLOORS: SemaphoreAdapter[] = [redlockSlotsFloor, s3SlotsFloor]
