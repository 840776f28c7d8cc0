/**
 * The servers a bench run measures on: the test kits' stores that the selected adapters need, started as
 * children on loopback, and the `Env` the adapters read. Shared by the scenario runner (run.ts) and the
 * scale runner (scale-run.ts), so both measure on the same set-up.
 */
import { join } from 'node:path'
import { KITS, type KitStore, kit } from '../test/kits/index.js'
import { loopback } from '../test/kits/kit.js'
import { useLocalCredentials } from '../test/servers/dynamodb.js'
import { tempDir } from '../test/support/temp.js'
import type { Adapter, Env } from './adapter.js'
import { countStatements } from './postgres.js'

export interface BenchEnv {
  readonly env: Env
  /** Each started kit store, by kit id (the shared one of the kit, not a variant's own). */
  readonly stores: ReadonlyMap<string, KitStore>
  /** Stops every server and removes the folder. */
  close(): Promise<void>
}

/** Starts the stores `selected` run on (and only those: a run matched to a few adapters starts no JVM it does not need). */
export async function startEnv(selected: readonly Pick<Adapter, 'store'>[]): Promise<BenchEnv> {
  // Credentials first, before any kit sets its own with `??=`: DynamoDB Local refuses an access key id that is
  // not letters and digits, and the S3 and GCS test servers take any.
  useLocalCredentials()
  const dir = tempDir('bench')
  /**
   * The kits' stores: one per kit with bench adapters on a store some selected adapter runs on, shared by
   * its adapters and the peers of that store (scenario h counts a blocked waiter's commands on the Redis
   * server), plus one of its own for a variant that asks for it (fsync=false gets a folder of its own).
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
  let pgCounter: Awaited<ReturnType<typeof countStatements>> | undefined
  const close = async () => {
    await pgCounter?.close()
    await Promise.all(stores.map((store) => store.close()))
    dir.cleanup()
  }
  try {
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
    pgCounter = pg ? await countStatements(pg.ports[0]!) : undefined
    if (pg && pgCounter) {
      for (const v of kit('postgres').bench ?? []) urls[v.name] = pg.urlVia!([pgCounter.port], v.query)
    }
    /** The shared store of the kit whose bench variants run on `store` (its id need not be the store's name). */
    const storeOf = (store: string) => {
      const k = KITS.find((k) => shared.has(k.id) && k.bench?.some((v) => v.store === store))
      return k && shared.get(k.id)
    }
    const counter = pgCounter
    // The peers' stores: the same servers fencelock runs on (0 or empty where no selected adapter needs one).
    const env: Env = {
      postgres: pg && counter ? pg.urlVia!([counter.port]) : '',
      ...(counter ? { postgresStatements: () => counter.count() } : {}),
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
    return { env, stores: shared, close }
  } catch (error) {
    await close()
    throw error
  }
}
