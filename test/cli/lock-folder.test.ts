import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { BOOT_FOLDER, EPOCH_FOLDER } from '../../src/backends/file/epochs.js'
import { keyFolderName } from '../../src/backends/file/generations.js'
import { defaultFolder } from '../../src/cli/lock-folder.js'
import { CLI } from '../support/processes.js'
import { tempDir } from '../support/temp.js'

const dir = tempDir('lock-folder')
after(() => dir.cleanup())
let n = 0
/** A fresh path in the temp folder, and the per-user folder an env pointing there gives. */
const fresh = () => {
  const base = join(dir.path, `case-${n++}`)
  mkdirSync(base)
  return { shared: join(base, 'fencelock'), env: { XDG_STATE_HOME: join(base, 'state') }, base }
}
const modeOf = (path: string) => statSync(path).mode & 0o7777

describe('the default lock folder', () => {
  it('is the shared folder, created with mode 1777 (like /tmp), silently', () => {
    const { shared, env } = fresh()
    const notes: string[] = []
    assert.equal(
      defaultFolder(env, shared, (line) => notes.push(line)),
      shared,
    )
    assert.equal(modeOf(shared), 0o1777)
    assert.equal(notes.length, 0)
    assert.equal(
      defaultFolder(env, shared, (line) => notes.push(line)),
      shared,
      'and again once it exists',
    )
    assert.deepEqual(readdirSync(join(shared, '..')), ['fencelock'], 'nothing left beside it')
  })

  it('is chosen but not created, nor its mode changed, for doctor (create: false)', () => {
    const { shared, env } = fresh()
    const notes: string[] = []
    assert.equal(
      defaultFolder(env, shared, (line) => notes.push(line), false),
      shared,
    )
    assert.equal(existsSync(shared), false)
    mkdirSync(shared, { mode: 0o755 })
    assert.equal(
      defaultFolder(env, shared, (line) => notes.push(line), false),
      shared,
    )
    assert.equal(modeOf(shared), 0o755)
    assert.deepEqual(notes, [])
  })

  it('gets mode 1777 back when it is ours', () => {
    const { shared, env } = fresh()
    mkdirSync(shared, { mode: 0o755 })
    assert.equal(
      defaultFolder(env, shared, () => {}),
      shared,
    )
    assert.equal(modeOf(shared), 0o1777)
  })

  const fallbacks: Array<[string, (base: string, shared: string) => void, RegExp]> = [
    ['cannot be created', (base) => writeFileSync(join(base, 'file'), ''), /ENOTDIR|ENOENT/],
    ['is a file', (_, shared) => writeFileSync(shared, ''), /is not a folder/],
    ['is a link', (base, shared) => symlinkSync(base, shared), /is not a folder/],
  ]
  for (const [name, make, reason] of fallbacks) {
    it(`is the per-user folder, with a one-line note, when the shared one ${name}`, () => {
      const c = fresh()
      make(c.base, c.shared)
      const shared = name === 'cannot be created' ? join(c.base, 'file', 'fencelock') : c.shared
      const notes: string[] = []
      const chosen = defaultFolder(c.env, shared, (line) => notes.push(line))
      assert.equal(chosen, join(c.env.XDG_STATE_HOME, 'fencelock', 'locks'))
      assert.equal(notes.length, 1)
      assert.match(
        notes[0]!,
        new RegExp(`cannot use the shared lock folder ${shared} \\(.*\\); using ${chosen},`),
      )
      assert.match(notes[0]!, reason)
    })
  }

  for (const [umask, reason] of [
    [0o077, /the umask 0077 would hide this user's lock records from other users/],
    [0o000, /the umask 0000 would let other users rewrite this user's lock records/],
  ] as const) {
    it(`is the per-user folder when the umask is ${umask.toString(8).padStart(4, '0')}`, () => {
      const { shared, env } = fresh()
      const before = process.umask(umask)
      try {
        const notes: string[] = []
        assert.notEqual(
          defaultFolder(env, shared, (line) => notes.push(line)),
          shared,
        )
        assert.match(notes[0]!, reason)
      } finally {
        process.umask(before)
      }
    })
  }

  it(
    "is the per-user folder when the shared one is another user's, not 1777",
    { skip: process.getuid?.() !== 0 && 'needs root, to give a folder away' },
    () => {
      const { shared, env } = fresh()
      mkdirSync(shared, { mode: 0o755 })
      chownSync(shared, 65534, 65534)
      const notes: string[] = []
      assert.notEqual(
        defaultFolder(env, shared, (line) => notes.push(line)),
        shared,
      )
      assert.match(notes[0]!, /has mode 755, not 1777, and belongs to user 65534/)
    },
  )
})

describe('a shared root (mode 1777)', () => {
  /**
   * Runs `fencelock run <key>` with a command that reports, while the lock is held, the mode of the key's
   * folder and of each file in it: once released, the folder is retired (the backend removes it).
   */
  const modesWhileHeld = async (root: string, key: string) => {
    const folder = join(root, keyFolderName(key))
    const report =
      "const fs = require('node:fs'); const f = process.argv[1]; const mode = (p) => fs.statSync(p).mode & 0o7777; " +
      'console.log(JSON.stringify({ folder: mode(f), files: fs.readdirSync(f).map((n) => mode(f + "/" + n)) }))'
    const { stdout } = await promisify(execFile)(process.execPath, [
      CLI,
      'run',
      key,
      '--url',
      pathToFileURL(root).href,
      '--',
      process.execPath,
      '-e',
      report,
      folder,
    ])
    return JSON.parse(stdout) as { folder: number; files: number[] }
  }

  it("gets the epoch and reservation folders and each key's folder made 1777, so other users can take them", async () => {
    const root = join(dir.path, 'shared-root')
    mkdirSync(root)
    chmodSync(root, 0o1777)
    const modes = await modesWhileHeld(root, 'nightly backup')
    assert.equal(modeOf(join(root, EPOCH_FOLDER)), 0o1777)
    assert.equal(modeOf(join(root, BOOT_FOLDER)), 0o1777)
    assert.equal(modes.folder, 0o1777)
    assert.ok(modes.files.length > 0, 'the held key has its record')
    for (const mode of modes.files) assert.equal(mode & 0o004, 0o004, 'readable by all')
  })

  it('is left to the backend when it is not shared', async () => {
    const root = join(dir.path, 'private-root')
    mkdirSync(root, { mode: 0o755 })
    const modes = await modesWhileHeld(root, 'k')
    assert.notEqual(modes.folder & 0o1000, 0o1000)
  })
})
