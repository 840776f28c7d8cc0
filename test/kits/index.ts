/** Every test kit: the conformance entries, the chaos targets and the bench's fencelock adapters are built from this list. */
import { dynamodbKit } from './dynamodb.js'
import { etcdKit1, etcdKit3 } from './etcd.js'
import { fileKit } from './file.js'
import { gcsKit } from './gcs.js'
import type { Kit } from './kit.js'
import { memoryKit } from './memory.js'
import { mysqlAnsiKit, mysqlKit, mysqlOracleKit } from './mysql.js'
import { postgresKit, postgresRepeatableReadKit, postgresSerializableKit } from './postgres.js'
import { redisAofKit, redisClusterKit, redisFairKit, redisKit } from './redis.js'
import { redlock3Kit, redlock5Kit } from './redlock.js'
import { s3Kit } from './s3.js'
import { zookeeperKit1, zookeeperKit3 } from './zookeeper.js'

export type { Kit, KitStore } from './kit.js'

export const KITS: readonly Kit[] = [
  memoryKit,
  fileKit,
  redisKit,
  redisFairKit,
  redisAofKit,
  redisClusterKit,
  redlock5Kit,
  redlock3Kit,
  etcdKit1,
  etcdKit3,
  s3Kit,
  gcsKit,
  dynamodbKit,
  mysqlKit,
  mysqlOracleKit,
  mysqlAnsiKit,
  postgresKit,
  postgresSerializableKit,
  postgresRepeatableReadKit,
  zookeeperKit1,
  zookeeperKit3,
]

/** The kit named `id`. */
export function kit(id: string): Kit {
  const found = KITS.find((k) => k.id === id)
  if (!found) throw new Error(`no test kit "${id}"; known: ${KITS.map((k) => k.id).join(', ')}`)
  return found
}
