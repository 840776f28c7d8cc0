/**
 * A shared lock root (sticky and writable by everyone, like /tmp): the processes of several users share
 * its locks through the library itself, not only through the CLI. One user (this test process, root)
 * takes keys first, which creates `.boot`, `.epoch` and the keys' folders; another user (a child process
 * running as `nobody`) must then take the same keys and new ones. In a private root the folders keep the
 * process's umask.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { chmodSync, mkdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { BOOT_FOLDER, EPOCH_FOLDER } from '../../src/backends/file/epochs.js'
import { keyFolderName } from '../../src/backends/file/generations.js'
import { fileBackend } from '../../src/backends/file/index.js'
import { createLockClient } from '../../src/index.js'
import { tempDir } from '../support/temp.js'

const dir = tempDir('file-shared')
after(() => dir.cleanup())
// Other users must reach the roots below.
chmodSync(dir.path, 0o755)

const INDEX = pathToFileURL(join(import.meta.dirname, '../../src/index.js')).href
const FILE = pathToFileURL(join(import.meta.dirname, '../../src/backends/file/index.js')).href
/** Folders stay after their release (no retire), so that the test can look at each one's mode. */
const KEEP = { retireAfterMs: Number.POSITIVE_INFINITY }
const NOBODY = 65534

/** Takes each key once as user `uid` in a process of its own; its fences, or its exit code and stderr. */
function acquireAs(uid: number, root: string, keys: string[]): Promise<bigint[]> {
  const script = `
    import { createLockClient } from ${JSON.stringify(INDEX)}
    import { fileBackend } from ${JSON.stringify(FILE)}
    const backend = fileBackend({ dir: ${JSON.stringify(root)} }, { retireAfterMs: Number.POSITIVE_INFINITY })
    const client = createLockClient(backend, { ttl: '5s' })
    const fences = []
    for (const key of ${JSON.stringify(keys)}) {
      const lock = await client.acquire(key, { timeout: '10s' })
      fences.push(String(lock.fence))
      await lock.release()
    }
    await client.close()
    console.log(JSON.stringify(fences))`
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      uid,
      gid: uid,
      cwd: '/',
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => {
      out += d
    })
    child.stderr.on('data', (d) => {
      err += d
    })
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`uid ${uid} exited ${code}: ${err}`))
      resolve((JSON.parse(out) as string[]).map(BigInt))
    })
  })
}

/** Takes each key once in this process (root); the fences. */
async function acquireHere(root: string, keys: string[]): Promise<bigint[]> {
  const client = createLockClient(fileBackend({ dir: root }, KEEP), { ttl: '5s' })
  const fences: bigint[] = []
  for (const key of keys) {
    const lock = await client.acquire(key)
    fences.push(lock.fence)
    await lock.release()
  }
  await client.close()
  return fences
}

const modeOf = (path: string) => statSync(path).mode & 0o7777

describe('file backend: a shared lock root', () => {
  it(
    'another user takes the keys one user made first, and new ones',
    {
      timeout: 60_000,
      // Running a process as another user takes root.
      skip: process.getuid?.() === 0 ? false : 'needs root, to run a process as another user',
    },
    async () => {
      const root = join(dir.path, 'shared')
      mkdirSync(root)
      chmodSync(root, 0o1777)
      const first = await acquireHere(root, ['deploy', 'backup'])
      for (const folder of [BOOT_FOLDER, EPOCH_FOLDER, keyFolderName('deploy'), keyFolderName('backup')]) {
        assert.equal(modeOf(join(root, folder)), 0o1777, `${folder} is not shared`)
      }
      const theirs = await acquireAs(NOBODY, root, ['deploy', 'backup', 'new-key'])
      assert.ok(theirs[0]! > first[0]! && theirs[1]! > first[1]!, `fences ${theirs} after ${first}`)
      assert.equal(modeOf(join(root, keyFolderName('new-key'))), 0o1777)
      // And back: the first user takes the key the other one made.
      const again = await acquireHere(root, ['new-key'])
      assert.ok(again[0]! > theirs[2]!)
    },
  )

  it("a private root's folders keep the process's umask", async () => {
    const root = join(dir.path, 'private')
    mkdirSync(root, { mode: 0o755 })
    await acquireHere(root, ['k'])
    for (const folder of [BOOT_FOLDER, EPOCH_FOLDER, keyFolderName('k')]) {
      assert.equal(modeOf(join(root, folder)) & 0o022, 0, `${folder} is writable by others`)
    }
  })
})
