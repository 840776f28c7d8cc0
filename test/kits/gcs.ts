/**
 * The GCS backend's kit: the GCS test server of test/servers/gcs.ts in this process (it keeps its objects
 * across `restart()`, so fences are durable), reached over HTTP by this process and by `fencelock hold`
 * children through the URL's `endpoint` (with a custom endpoint and a project the SDK sends no
 * credentials). The minimum ttl is 3 s: renewals come every ttl/3 and GCS takes about one write per
 * second per object (the driver's `minWriteIntervalMs`).
 */
import { Storage } from '@google-cloud/storage'
import { GCS_LIMITS, GcsCasAdapter } from '../../src/backends/gcs/index.js'
import { DEFAULT_PREFIX, lockObjectName } from '../../src/backends/gcs/layout.js'
import { type GcsFake, startGcsFake } from '../servers/gcs.js'
import { CAS_LACKS, casCapabilities, fakeChaos, fakeKitStore } from './cas.js'
import type { Kit, KitStore } from './kit.js'

const BUCKET = 'fencelock-tests'
const PROJECT = 'fencelock-tests'

const urlAt = (port: number, query: string) =>
  `gs://${BUCKET}/?endpoint=http://127.0.0.1:${port}&project=${PROJECT}${query.replace(/^\?/, '&')}`

/**
 * What an operator's `gcloud storage rm` (or a lifecycle Delete rule) does: deletes `key`'s lock object, or
 * every object under the kit's prefix, unconditionally, over the JSON API.
 */
async function deleteObjects(storage: Storage, key?: string): Promise<void> {
  const bucket = storage.bucket(BUCKET)
  if (key !== undefined) {
    await bucket.file(lockObjectName(key)).delete({ ignoreNotFound: true })
    return
  }
  const [files] = await bucket.getFiles({ prefix: DEFAULT_PREFIX })
  for (const file of files) await file.delete({ ignoreNotFound: true })
}

function gcsStore(server: GcsFake): KitStore {
  const storage = new Storage({ apiEndpoint: server.endpoint, projectId: PROJECT })
  // The backend's own driver, so a lease is broken at the very object and in the very format it uses.
  const driver = new GcsCasAdapter({ storage, bucket: BUCKET, prefix: DEFAULT_PREFIX, id: 'kit admin' })
  // The record's writes are uploads (POST /upload/storage/v1/b/…/o with ifGenerationMatch).
  return fakeKitStore({
    name: 'gcs',
    server,
    urlAt,
    driver,
    writes: { method: 'POST', path: /^\/upload\// },
    deleteState: (key) => deleteObjects(storage, key),
  })
}

export const gcsKit: Kit = {
  id: 'gcs',
  backend: 'gcs',
  title: 'gcs (test server)',
  entry: 'gcs/conformance',
  primitives: ['mutex', 'slots', 'election', 'multikey', 'resume'],
  networked: true,
  capabilities: casCapabilities(3000),
  lacks: CAS_LACKS,
  async start() {
    const server = await startGcsFake()
    server.createBucket(BUCKET)
    return gcsStore(server)
  },
  chaos: fakeChaos('gcs', GCS_LIMITS.minTtlMs),
  bench: [{ name: 'fencelock gcs', store: 'gcs', note: 'the in-process test server' }],
}
