/**
 * The S3 backend's kit: the S3 test server of test/servers/s3.ts in this process (it keeps its objects
 * across `restart()`, so fences are durable), reached over HTTP by this process and by `fencelock hold`
 * children through the URL's `endpoint`. Credentials: any (the test server ignores them), put in the
 * environment so the SDK's default chain finds them here and in child processes.
 */
import * as sdk from '@aws-sdk/client-s3'
import { S3CasAdapter } from '../../src/backends/s3/index.js'
import { DEFAULT_PREFIX, lockObjectKey } from '../../src/backends/s3/layout.js'
import { type S3Fake, startS3Fake } from '../servers/s3.js'
import { CAS_LACKS, casCapabilities, fakeChaos, fakeKitStore } from './cas.js'
import type { Kit, KitStore } from './kit.js'

const BUCKET = 'fencelock-tests'
const REGION = 'us-east-1'

/**
 * Any credentials: the SDK signs every request, the test server ignores the signature. Letters only:
 * DynamoDB Local rejects a key id with any other character, and a chaos run starts both kits in one
 * process (whichever sets the environment first wins, for its workers too).
 */
function fakeCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID ??= 'fencelock'
  process.env.AWS_SECRET_ACCESS_KEY ??= 'fencelock'
}

const urlAt = (port: number, query: string) =>
  `s3://${BUCKET}/?endpoint=http://127.0.0.1:${port}&forcePathStyle=true&region=${REGION}${query.replace(/^\?/, '&')}`

/**
 * What an operator's `aws s3 rm` (or a lifecycle expiration) does: deletes `key`'s lock object, or every
 * object under the kit's prefix, unconditionally, over the S3 API.
 */
async function deleteObjects(admin: sdk.S3Client, key?: string): Promise<void> {
  if (key !== undefined) {
    await admin.send(new sdk.DeleteObjectCommand({ Bucket: BUCKET, Key: lockObjectKey(key) }))
    return
  }
  let token: string | undefined
  do {
    const page = await admin.send(
      new sdk.ListObjectsV2Command({ Bucket: BUCKET, Prefix: DEFAULT_PREFIX, ContinuationToken: token }),
    )
    for (const object of page.Contents ?? []) {
      await admin.send(new sdk.DeleteObjectCommand({ Bucket: BUCKET, Key: object.Key }))
    }
    token = page.NextContinuationToken
  } while (token)
}

function s3Store(server: S3Fake): KitStore {
  const admin = new sdk.S3Client({
    endpoint: server.endpoint,
    forcePathStyle: true,
    region: REGION,
    credentials: { accessKeyId: 'admin', secretAccessKey: 'admin' },
  })
  // The backend's own driver (owning its client), so a lease is broken at the very object and in the very format it uses.
  const driver = new S3CasAdapter({
    client: admin,
    bucket: BUCKET,
    prefix: DEFAULT_PREFIX,
    id: 'kit admin',
    owned: true,
    sdk: async () => sdk,
  })
  // The record's writes are conditional PUTs (If-Match / If-None-Match).
  return fakeKitStore({
    name: 's3',
    server,
    urlAt,
    driver,
    writes: { method: 'PUT' },
    deleteState: (key) => deleteObjects(admin, key),
  })
}

export const s3Kit: Kit = {
  id: 's3',
  backend: 's3',
  title: 's3 (test server)',
  entry: 's3/conformance',
  primitives: ['mutex', 'slots', 'election', 'multikey', 'resume'],
  networked: true,
  capabilities: casCapabilities(2000),
  lacks: CAS_LACKS,
  async start() {
    fakeCredentials()
    const server = await startS3Fake()
    server.createBucket(BUCKET)
    return s3Store(server)
  },
  chaos: fakeChaos('s3'),
  bench: [{ name: 'fencelock s3', store: 's3', note: 'the in-process test server' }],
}
