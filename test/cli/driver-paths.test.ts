import assert from 'node:assert/strict'
import { cpSync, existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { basename, dirname, join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { driverSearchPaths } from '../../src/cli/driver-paths.js'
import { runCli } from '../support/processes.js'
import { tempDir } from '../support/temp.js'

describe('driverSearchPaths', () => {
  it('is the current project, then the global folders of npm, of node and of NODE_PATH, each once', () => {
    const env = {
      npm_config_global_prefix: '/home/me/.npm-global',
      NODE_PATH: '/opt/libs::/usr/lib/node_modules',
    }
    assert.deepEqual(driverSearchPaths('/srv/app', '/usr/bin/node', env, 'linux'), [
      '/srv/app',
      '/home/me/.npm-global/lib/node_modules',
      '/usr/lib/node_modules',
      '/opt/libs',
    ])
  })

  it("finds node's global folder beside node.exe on Windows", () => {
    assert.deepEqual(
      driverSearchPaths(
        'C:\\app',
        'C:\\Program Files\\nodejs\\node.exe',
        { NODE_PATH: 'D:\\libs;' },
        'win32',
      ),
      ['C:\\app', 'C:\\Program Files\\nodejs\\node_modules', 'D:\\libs'],
    )
  })
})

/**
 * A copy of the built CLI where the plain `import('ioredis')` finds nothing, as in npx's cache
 * (~/.npm/_npx/<hash>/node_modules/fencelock): only the CLI's own search paths can find the driver.
 */
describe('a driver not installed beside fencelock', () => {
  const dir = tempDir('drivers')
  after(() => dir.cleanup())
  const cli = join(dir.path, 'npx', 'node_modules', 'fencelock', 'src', 'cli', 'main.js')
  const empty = join(dir.path, 'empty')
  const project = join(dir.path, 'project')
  const prefix = join(dir.path, 'prefix')

  before(() => {
    const pkg = join(dir.path, 'npx', 'node_modules', 'fencelock')
    cpSync(fileURLToPath(new URL('../../src', import.meta.url)), join(pkg, 'src'), { recursive: true })
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'fencelock', type: 'module' }))
    // The repository's ioredis, linked into a fake project and a fake global folder (Node follows the link
    // to the real folder, so ioredis finds its own dependencies as usual).
    let ioredis = createRequire(import.meta.url).resolve('ioredis')
    while (basename(ioredis) !== 'ioredis') ioredis = dirname(ioredis)
    for (const modules of [join(project, 'node_modules'), join(prefix, 'lib', 'node_modules')]) {
      mkdirSync(modules, { recursive: true })
      symlinkSync(ioredis, join(modules, 'ioredis'))
    }
    mkdirSync(empty)
  })

  /** Runs the copied CLI in `cwd`, with none of the search hints of this test's own environment. */
  const run = (cwd: string, env: NodeJS.ProcessEnv) => {
    const clean = { ...process.env }
    for (const name of ['NODE_PATH', 'npm_config_global_prefix', 'npm_config_prefix', 'NPM_CONFIG_PREFIX'])
      delete clean[name]
    return runCli(['doctor', 'redis://127.0.0.1:1'], { cli, cwd, env: { ...clean, ...env } })
  }

  /** Found: the doctor got as far as the store, where nothing listens. */
  const assertFound = (r: { code: number; stdout: string; stderr: string }) => {
    assert.equal(r.code, 69, r.stderr)
    assert.match(r.stdout, /cannot reach the store: connection refused/)
  }

  it('is found in the project of the current folder', async () => {
    assertFound(await run(project, {}))
  })

  it("is found in npm's global folder (npx passes it on as npm_config_global_prefix)", async () => {
    assertFound(await run(empty, { npm_config_global_prefix: prefix }))
  })

  it('is found in a NODE_PATH folder', async () => {
    assertFound(await run(empty, { NODE_PATH: join(prefix, 'lib', 'node_modules') }))
  })

  const nodeGlobal = join(dirname(dirname(process.execPath)), 'lib', 'node_modules')
  it(
    'else: one line saying where it looked and both commands, exit 64',
    { skip: existsSync(join(nodeGlobal, 'ioredis')) && `ioredis is installed in ${nodeGlobal}` },
    async () => {
      const r = await run(empty, {})
      assert.equal(r.code, 64)
      assert.equal(r.stderr.trim().split('\n').length, 1)
      assert.ok(r.stderr.includes(`nor in ${empty}, ${nodeGlobal}:`), r.stderr)
      assert.match(r.stderr, /npm install ioredis in your project, or npm install -g ioredis beside a global/)
    },
  )
})
