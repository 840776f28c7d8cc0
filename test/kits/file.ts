/** The file backend's kit: a folder of lock files; no server, so nothing to crash or proxy. */
import { randomBytes } from 'node:crypto'
import { mkdirSync, readdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { keyFolderName } from '../../src/backends/file/generations.js'
import { TEST_BOOT_ID } from '../../src/backends/file/host-clock.js'
import { TEST_SWEEP_MS } from '../../src/backends/file/sweep.js'
import { tempDir } from '../support/temp.js'
import { sleep } from '../support/time.js'
import { type ChaosFeature, type Kit, type KitStore, RACE, ttlStore } from './kit.js'

/**
 * What a tmp cleaner or an operator does: the key's whole folder (its hashed name) removed, `rm -rf`. The
 * lease goes with it; the fence must not (the root's .epoch stays). A writer's temp file can land in the
 * folder during the removal (ENOTEMPTY): remove again, as a cleaner's next pass would (bounded).
 */
async function removeKeyFolder(locks: string, key: string): Promise<void> {
  await removeFolder(join(locks, keyFolderName(key)))
}

/** `rm -rf folder`, again while a writer's temp file lands in it meanwhile (bounded). */
async function removeFolder(folder: string): Promise<void> {
  for (let tries = 1; tries <= 100; tries++) {
    try {
      return rmSync(folder, { recursive: true, force: true })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOTEMPTY' || tries === 100) throw error
      await sleep(1)
    }
  }
}

/** The server faults the file backend's chaos targets apply. */
const FILE_CHAOS: readonly ChaosFeature[] = ['expire', 'delete-state', 'reboot', 'process-lease']

export const fileKit: Kit = {
  id: 'file',
  backend: 'file',
  title: 'file',
  entry: 'file/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'resume', 'rwlock'],
  networked: false,
  capabilities: ttlStore({ durableFences: true, deadHolder: 'at once' }),
  lacks: {
    fifo: RACE,
    session: "leases end by the host's monotonic clock, no session",
  },
  async start(options = {}): Promise<KitStore> {
    const temp = options.dir === undefined ? tempDir('file-kit') : undefined
    const locks = temp?.path ?? join(options.dir!, 'locks')
    mkdirSync(locks, { recursive: true })
    const url = (query = '') => `${pathToFileURL(locks).href}${query}`
    // `reboot` plays a boot for this process and the children it starts from then on (they inherit it).
    const realBoot = process.env[TEST_BOOT_ID]
    return {
      url,
      ports: [],
      urlVia: (_ports, query) => url(query),
      breakLease: (key) => removeKeyFolder(locks, key),
      // A cleaner: the key's folder, or everything in the root (`.epoch` and `.boot` included).
      async deleteState(key) {
        if (key !== undefined) return removeKeyFolder(locks, key)
        for (const name of readdirSync(locks)) await removeFolder(join(locks, name))
      },
      // A quick reboot: a new boot id, the wall clock where it was, the files as the page cache had them
      // (a clean reboot writes it back). The monotonic clock is not reset: nothing compares a deadline
      // across boots.
      async reboot() {
        process.env[TEST_BOOT_ID] = `test-boot-${randomBytes(8).toString('hex')}`
      },
      // No server: the folder is the store. The durable-fences case's new process reads it from disk.
      restart: async () => {},
      logs: () => ({}),
      recoveryMs: 1000,
      async close() {
        if (realBoot === undefined) delete process.env[TEST_BOOT_ID]
        else process.env[TEST_BOOT_ID] = realBoot
        temp?.cleanup()
      },
    }
  },
  chaos: [
    { name: 'file', features: FILE_CHAOS },
    // Every worker sweeps the root after each of its grants, whatever just ended: removals race acquires.
    { name: 'file-sweep', features: FILE_CHAOS, env: { [TEST_SWEEP_MS]: '0' } },
  ],
  bench: [
    { name: 'fencelock file', store: 'file', note: 'fsync once per boot' },
    { name: 'fencelock file (fsync=false)', store: 'file', query: '?fsync=false', separate: true },
  ],
}
