/**
 * The stores a chaos run can target, built from the test kits (test/kits): each kit names the targets it
 * serves and the scenarios' server faults that apply there. Real servers on loopback ports, their own temp
 * folders; workers reach a networked store through their own TCP proxies, so a fault can cut, slow or drop
 * one client's traffic; the file backend has no network.
 */
import { KITS } from '../kits/index.js'
import type { ChaosFeature, ChaosVariant, Kit, StoreFaults } from '../kits/kit.js'

export interface Store {
  /** The server ports a worker's proxies forward to (one proxy per port, per worker). */
  readonly ports: readonly number[]
  /** The URL a worker uses, given its proxies' ports (same order as `ports`). */
  urlVia(proxyPorts: readonly number[]): string
  /** The tail of each server's log, by name (kept beside a run's history). */
  logs(): Record<string, string>
  /** How long after a healed fault the store may take to serve again (on top of one ttl). */
  readonly recoveryMs: number
  /** Crash (SIGKILL) and restart the server, or one Redlock node (`node`), with whatever it persisted. */
  crash?(node?: number): Promise<void>
  /** Kill the etcd leader of a cluster and bring it back. */
  killLeader?(): Promise<void>
  /** Remove the holder's lease behind its back (a server-side clock jump: premature expiry). */
  expireEarly?(key: string): Promise<void>
  /** An operator deletes lock state: `key`'s, or every key's (the kit's `deleteState`). */
  deleteState?(key?: string): Promise<void>
  /** Cuts one member off from the others, clients' links up; resolves to the heal. */
  isolateMember?(node: number): Promise<() => Promise<void>>
  /** The host reboots quickly (the file backend): later processes see a new boot. */
  reboot?(): Promise<void>
  /** Replies lost after their commit, 503 bursts (a test server in this process). */
  readonly storeFaults?: StoreFaults
  close(): Promise<void>
}

export interface Target {
  readonly name: string
  /** Networked: faults on the client's traffic apply. */
  readonly networked: boolean
  /** Says which scenarios' server faults apply. */
  readonly features: ReadonlySet<ChaosFeature>
  /** The shortest ttl the backend accepts (0: the scenario's own always goes). */
  readonly minTtlMs: number
  start(dir: string): Promise<Store>
}

/** The chaos target `variant` of `kit`: the kit's store, with the faults its features promise. */
function targetOf(kit: Kit, variant: ChaosVariant): Target {
  return {
    name: variant.name,
    networked: kit.networked,
    features: new Set(variant.features),
    minTtlMs: variant.minTtlMs ?? 0,
    async start(dir) {
      // The workers inherit them (the harness spawns them with this process's environment).
      const restoreEnv = setEnv(variant.env ?? {})
      const store = await kit.start({ dir })
      const { crash, killLeader, urlVia, storeFaults, deleteState, isolateMember, reboot } = store
      const missing = [
        ...(urlVia ? [] : ['urlVia']),
        ...(variant.features.includes('crash') && !crash ? ['crash'] : []),
        ...(variant.features.includes('leader') && !killLeader ? ['killLeader'] : []),
        ...(variant.features.includes('durable') && !kit.capabilities.durableFences ? ['durableFences'] : []),
        ...(variant.features.includes('store-faults') && !storeFaults ? ['storeFaults'] : []),
        ...(variant.features.includes('delete-state') && !deleteState ? ['deleteState'] : []),
        ...(variant.features.includes('members') && !isolateMember ? ['isolateMember'] : []),
        ...(variant.features.includes('reboot') && !reboot ? ['reboot'] : []),
      ]
      if (missing.length > 0) {
        restoreEnv()
        await store.close()
        throw new Error(`chaos target ${variant.name}: kit ${kit.id} lacks ${missing.join(', ')}`)
      }
      return {
        ports: store.ports,
        urlVia: (ports) => urlVia!(ports, variant.query),
        logs: () => store.logs(),
        recoveryMs: store.recoveryMs,
        ...(crash ? { crash: (node?: number) => crash(node) } : {}),
        ...(killLeader ? { killLeader: () => killLeader() } : {}),
        ...(storeFaults ? { storeFaults } : {}),
        ...(deleteState ? { deleteState: (key?: string) => deleteState(key) } : {}),
        ...(isolateMember ? { isolateMember: (node: number) => isolateMember(node) } : {}),
        ...(reboot ? { reboot: () => reboot() } : {}),
        expireEarly: (key) => store.breakLease(key),
        close: async () => {
          restoreEnv()
          await store.close()
        },
      }
    },
  }
}

/** Sets `vars` in this process's environment; returns what puts the previous values back. */
function setEnv(vars: Readonly<Record<string, string>>): () => void {
  const before = Object.entries(vars).map(([name]) => [name, process.env[name]] as const)
  Object.assign(process.env, vars)
  return () => {
    for (const [name, value] of before) {
      if (value === undefined) delete process.env[name]
      else process.env[name] = value
    }
  }
}

export const targets: Record<string, Target> = Object.fromEntries(
  KITS.flatMap((kit) => (kit.chaos ?? []).map((variant) => [variant.name, targetOf(kit, variant)])),
)
