/**
 * What a store keeps, in its own accounting, for the scale runner's s1 (what stays per distinct lock name):
 * records (keys, rows, files and folders, znodes, objects, items) and bytes where the store tells them.
 * Each reading covers the whole store the bench started (every prefix, table and folder, the peers' too):
 * s1 runs one adapter at a time and takes the difference of two readings.
 */
import { lstat, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as ddb from '@aws-sdk/client-dynamodb'
import * as s3 from '@aws-sdk/client-s3'
import { Storage } from '@google-cloud/storage'
import { Etcd3 } from 'etcd3'
import { Redis } from 'ioredis'
import { createConnection } from 'mysql2/promise'
import zookeeper, { type Client } from 'node-zookeeper-client'
import postgres from 'postgres'
import type { Env } from './adapter.js'

export interface Footprint {
  readonly records: number
  /** Bytes as the store counts them (Redis used_memory, table sizes, file blocks, etcd's db in use, object sizes). */
  readonly bytes?: number
}

/** The bucket of the S3 and GCS kits (test/kits/{s3,gcs}.ts). */
const BUCKET = 'fencelock-tests'

async function redisFootprint(ports: readonly number[]): Promise<Footprint> {
  let records = 0
  let bytes = 0
  for (const port of ports) {
    const admin = new Redis(port, '127.0.0.1')
    try {
      records += await admin.dbsize()
      bytes += Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1])
    } finally {
      admin.disconnect()
    }
  }
  return { records, bytes }
}

async function postgresFootprint(env: Env): Promise<Footprint> {
  const sql = postgres(env.postgres, { max: 1, onnotice: () => {} })
  try {
    const tables = await sql<{ name: string }[]>`
      SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) AS name FROM pg_tables
      WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`
    let records = 0
    let bytes = 0
    for (const { name } of tables) {
      const [row] = await sql.unsafe<{ n: string; size: string }[]>(
        `SELECT count(*)::text AS n, pg_total_relation_size('${name.replace(/'/g, "''")}')::text AS size FROM ${name}`,
      )
      records += Number(row!.n)
      bytes += Number(row!.size)
    }
    return { records, bytes }
  } finally {
    await sql.end()
  }
}

async function mysqlFootprint(env: Env): Promise<Footprint> {
  const url = new URL(env.urls['fencelock mysql']!)
  const connection = await createConnection({
    host: url.hostname,
    port: Number(url.port),
    user: decodeURIComponent(url.username),
    database: url.pathname.slice(1),
  })
  try {
    const [tables] = (await connection.query(
      'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE()',
    )) as unknown as [Array<{ name: string }>]
    let records = 0
    let bytes = 0
    for (const { name } of tables) {
      // InnoDB's sizes are statistics: refreshed here so the reading is of now.
      await connection.query(`ANALYZE TABLE \`${name}\``)
      const [[row]] = (await connection.query(`SELECT count(*) AS n FROM \`${name}\``)) as unknown as [
        Array<{ n: number }>,
      ]
      records += Number(row!.n)
      const [[size]] = (await connection.query(
        'SELECT data_length + index_length AS size FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
        [name],
      )) as unknown as [Array<{ size: number }>]
      bytes += Number(size!.size)
    }
    return { records, bytes }
  } finally {
    await connection.end()
  }
}

/** Inodes (files and folders, the root excluded) and allocated bytes under each folder. */
async function fileFootprint(roots: readonly string[]): Promise<Footprint> {
  let records = 0
  let bytes = 0
  const walk = async (folder: string): Promise<void> => {
    let entries: string[]
    try {
      entries = await readdir(folder)
    } catch {
      return // not made yet: nothing kept
    }
    for (const entry of entries) {
      const path = join(folder, entry)
      const stat = await lstat(path)
      records++
      bytes += stat.blocks * 512
      if (stat.isDirectory()) await walk(path)
    }
  }
  for (const root of roots) await walk(root)
  return { records, bytes }
}

async function etcdFootprint(env: Env): Promise<Footprint> {
  const client = new Etcd3({ hosts: `http://${env.etcd}` })
  try {
    const records = await client.getAll().count()
    const status = await client.maintenance.status()
    return { records, bytes: Number(status.dbSizeInUse ?? status.dbSize) }
  } finally {
    client.close()
  }
}

/** Znodes under `/`, ZooKeeper's own `/zookeeper` subtree excluded. */
async function zookeeperFootprint(env: Env): Promise<Footprint> {
  const client: Client = zookeeper.createClient(env.zookeeper, { sessionTimeout: 30_000, retries: 0 })
  await new Promise<void>((resolve) => {
    client.once('connected', resolve)
    client.connect()
  })
  const children = (path: string) =>
    new Promise<string[]>((resolve, reject) =>
      client.getChildren(path, (error, names) => (error ? reject(error) : resolve(names))),
    )
  try {
    let records = 0
    let level = ['/']
    while (level.length > 0) {
      const next: string[] = []
      // One level at a time, its listings pipelined on the session.
      const listed = await Promise.all(level.map(async (p) => [p, await children(p)] as const))
      for (const [parent, names] of listed)
        for (const name of names) {
          if (parent === '/' && name === 'zookeeper') continue
          records++
          next.push(parent === '/' ? `/${name}` : `${parent}/${name}`)
        }
      level = next
    }
    return { records }
  } finally {
    client.close()
  }
}

async function s3Footprint(env: Env): Promise<Footprint> {
  const client = new s3.S3Client({ endpoint: env.endpoints.s3!, forcePathStyle: true, region: 'us-east-1' })
  try {
    let records = 0
    let bytes = 0
    let token: string | undefined
    do {
      const page = await client.send(
        new s3.ListObjectsV2Command({ Bucket: BUCKET, ...(token ? { ContinuationToken: token } : {}) }),
      )
      for (const object of page.Contents ?? []) {
        records++
        bytes += object.Size ?? 0
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined
    } while (token)
    return { records, bytes }
  } finally {
    client.destroy()
  }
}

async function gcsFootprint(env: Env): Promise<Footprint> {
  const storage = new Storage({ apiEndpoint: env.endpoints.gcs!, projectId: BUCKET })
  const [files] = await storage.bucket(BUCKET).getFiles()
  return { records: files.length, bytes: files.reduce((sum, f) => sum + Number(f.metadata.size ?? 0), 0) }
}

async function dynamodbFootprint(env: Env): Promise<Footprint> {
  const client = new ddb.DynamoDBClient({ endpoint: env.endpoints.dynamodb!, region: 'us-east-1' })
  try {
    let records = 0
    const { TableNames = [] } = await client.send(new ddb.ListTablesCommand({}))
    for (const table of TableNames) {
      let start: Record<string, ddb.AttributeValue> | undefined
      do {
        const page = await client.send(
          new ddb.ScanCommand({
            TableName: table,
            Select: 'COUNT',
            ...(start ? { ExclusiveStartKey: start } : {}),
          }),
        )
        records += page.Count ?? 0
        start = page.LastEvaluatedKey
      } while (start)
    }
    return { records }
  } finally {
    client.destroy()
  }
}

/** The folders file locks live in: each fencelock file adapter's root, and proper-lockfile's (bench/adapters.ts). */
const fileRoots = (env: Env) => [
  ...Object.values(env.urls)
    .filter((url) => url.startsWith('file:'))
    .map((url) => fileURLToPath(url.split('?')[0]!)),
  join(env.dir, 'proper-lockfile'),
]

/** A reading of `store` (a bench store name), or undefined where the runner cannot count it (memory). */
export async function footprint(store: string, env: Env): Promise<Footprint | undefined> {
  switch (store) {
    case 'redis':
      return redisFootprint([env.redis])
    case 'redis x5':
      return redisFootprint(env.redis5)
    case 'postgres':
      return postgresFootprint(env)
    case 'mysql':
      return mysqlFootprint(env)
    case 'file':
      return fileFootprint(fileRoots(env))
    case 'etcd':
      return etcdFootprint(env)
    case 'zookeeper':
      return zookeeperFootprint(env)
    case 's3':
      return s3Footprint(env)
    case 'gcs':
      return gcsFootprint(env)
    case 'dynamodb':
      return dynamodbFootprint(env)
    default:
      return undefined
  }
}
