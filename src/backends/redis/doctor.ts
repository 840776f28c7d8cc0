/**
 * `fencelock doctor` for Redis: the server's version and role, and the settings a lock relies on
 * (persistence, eviction, replication), each said with what goes wrong and what to set; and how many
 * lock names keep a fence counter under the prefix (a bounded SCAN: the one loop here, over its cursor).
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import type { DoctorFinding } from '../../core/backend.js'
import type { RedisClient } from './connect.js'
import { isCluster } from './store.js'

/** The findings on the server behind `client` (a Cluster: its first master). */
export async function doctor(
  client: RedisClient,
  id: string,
  minReplicas: number,
  signal: AbortSignal,
  prefix?: string,
): Promise<DoctorFinding[]> {
  const node = (isCluster(client) ? client.nodes('master')[0] : client) as Redis | undefined
  if (!node) return [{ level: 'error', message: `no reachable master in ${id}` }]
  const info = parseInfo((await raceSignal(node.info(), signal)) as string)
  const config = async (name: string): Promise<string | undefined> => {
    try {
      const reply = (await raceSignal(node.config('GET', name), signal)) as string[]
      return reply[1]
    } catch {
      return undefined
    }
  }
  const appendonly = await config('appendonly')
  const fsync = await config('appendfsync')
  const policy = await config('maxmemory-policy')
  return [
    ...serverFindings(info),
    persistenceFinding(appendonly, fsync),
    ...(policy === undefined ? [] : [evictionFinding(policy)]),
    {
      level: 'info',
      message:
        info.cluster_enabled === '1' ? 'cluster mode: keys are hash-tagged per lock' : 'cluster mode: off',
    },
    ...replicationFindings(Number(info.connected_slaves ?? 0), minReplicas),
    ...(prefix === undefined ? [] : [await countFinding(node, prefix, isCluster(client), signal)]),
  ]
}

/** How many keys a SCAN for fence counters examines at most (100 round trips of 1000). */
const SCAN_LIMIT = 100_000

/**
 * How many lock names keep a fence counter under `prefix` (`<prefix>{<key>}:fence`, kept an hour after
 * its last grant): a SCAN, stopped after SCAN_LIMIT keys examined ("at least N" then).
 */
async function countFinding(
  node: Redis,
  prefix: string,
  cluster: boolean,
  signal: AbortSignal,
): Promise<DoctorFinding> {
  if (cluster) return { level: 'info', message: 'lock names kept: not counted on a cluster' }
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}{*}:fence`
  let cursor = '0'
  let examined = 0
  let names = 0
  do {
    const [next, keys] = (await raceSignal(node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000), signal)) as [
      string,
      string[],
    ]
    cursor = next
    names += keys.length
    examined += 1000
  } while (cursor !== '0' && examined < SCAN_LIMIT)
  const count = cursor === '0' ? `${names}` : `at least ${names} (SCAN stopped after ${SCAN_LIMIT} keys)`
  return { level: 'info', message: `lock names kept: ${count} (fence counters under "${prefix}")` }
}

/** The fields of an INFO reply. */
export function parseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':')
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1)
  }
  return out
}

function serverFindings(info: Record<string, string>): DoctorFinding[] {
  const findings: DoctorFinding[] = [
    {
      level: 'info',
      message: `Redis ${info.redis_version ?? 'unknown version'} (${info.redis_mode ?? 'standalone'})`,
    },
  ]
  if (info.role && info.role !== 'master') {
    findings.push({
      level: 'error',
      message: `connected to a ${info.role}: locks must be taken on the primary`,
    })
  }
  return findings
}

/** `appendonly` is undefined when CONFIG GET is refused. */
function persistenceFinding(appendonly: string | undefined, fsync: string | undefined): DoctorFinding {
  if (appendonly === undefined) {
    return {
      level: 'warn',
      message: 'CONFIG GET is not allowed here: persistence and eviction could not be checked',
    }
  }
  if (appendonly !== 'yes') {
    return {
      level: 'warn',
      message:
        'appendonly is off: after a restart Redis forgets held locks, so a lock can be granted twice ' +
        '(fences still rise: they come from the server clock). Use appendonly yes with appendfsync always, ' +
        'or keep a crashed server down for longer than the longest ttl',
    }
  }
  if (fsync !== 'always') {
    return {
      level: 'warn',
      message: `appendfsync is ${fsync}: a crash can lose the last second of grants; "always" cannot`,
    }
  }
  return { level: 'ok', message: 'appendonly yes, appendfsync always' }
}

function evictionFinding(policy: string): DoctorFinding {
  if (policy === 'noeviction') {
    return { level: 'ok', message: 'maxmemory-policy noeviction: lock keys are never evicted' }
  }
  return {
    level: 'warn',
    message:
      `maxmemory-policy is ${policy}: under memory pressure Redis may evict lock keys (an early ` +
      'release). Use noeviction',
  }
}

function replicationFindings(replicas: number, minReplicas: number): DoctorFinding[] {
  if (replicas > 0 && minReplicas === 0) {
    return [
      {
        level: 'warn',
        message:
          `${replicas} replica(s) replicate asynchronously: a failover can lose a held lock. Consider ` +
          '?minReplicas=1 (WAIT after acquiring), or Redlock over independent primaries',
      },
    ]
  }
  if (minReplicas > replicas) {
    return [
      {
        level: 'error',
        message: `minReplicas is ${minReplicas} but only ${replicas} replica(s) are connected: every acquire will fail`,
      },
    ]
  }
  return []
}
