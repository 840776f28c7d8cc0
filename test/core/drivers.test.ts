import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, afterEach, before, describe, it } from 'node:test'
import { setDriverSearchPaths } from '../../src/core/drivers.js'
import { DriverMissingError } from '../../src/core/errors.js'
import { loadDriver } from '../../src/core/url.js'
import { tempDir } from '../support/temp.js'

/** A package installed nowhere near fencelock, so `import()` of its name from here fails. */
const PKG = 'fencelock-test-driver'
const importIt = () => import(PKG) as Promise<{ default: { answer: number } }>
const url = new URL('redis://127.0.0.1:6379')

describe('loadDriver', () => {
  const dir = tempDir('driver-roots')
  const global = join(dir.path, 'prefix', 'lib', 'node_modules')
  before(() => {
    mkdirSync(join(global, PKG), { recursive: true })
    writeFileSync(join(global, PKG, 'package.json'), JSON.stringify({ name: PKG, main: 'main.cjs' }))
    writeFileSync(join(global, PKG, 'main.cjs'), 'module.exports = { answer: 42 }')
  })
  after(() => dir.cleanup())
  afterEach(() => setDriverSearchPaths([]))

  it('without search paths (the library), fails naming the one command to run', async () => {
    const error = await loadDriver(PKG, 'redis', url, importIt).catch((e: unknown) => e)
    assert.ok(error instanceof DriverMissingError)
    assert.equal(
      error.message,
      `The redis backend needs the ${PKG} package, which is not installed: npm install ${PKG}`,
    )
    assert.equal((error.cause as NodeJS.ErrnoException).code, 'ERR_MODULE_NOT_FOUND')
  })

  it('imports it from the first search path that has it, when the plain import finds nothing', async () => {
    setDriverSearchPaths([join(dir.path, 'elsewhere'), global])
    const driver = await loadDriver(PKG, 'redis', url, importIt)
    assert.equal(driver.default.answer, 42)
  })

  it("never finds a driver in a global folder's parents (a node inside some project's tree)", async () => {
    // <dir>/prefix/lib/node_modules has the package; <dir>/prefix/lib/node_modules/x/lib/node_modules does
    // not, though walking up from it would reach the first.
    const nested = join(global, 'x', 'lib', 'node_modules')
    mkdirSync(nested, { recursive: true })
    setDriverSearchPaths([nested])
    const error = await loadDriver(PKG, 'redis', url, importIt).catch((e: unknown) => e)
    assert.ok(error instanceof DriverMissingError, `found through a parent: ${error}`)
  })

  it('names every place it looked, and both commands, when none has it', async () => {
    const places = [join(dir.path, 'project'), join(dir.path, 'other', 'lib', 'node_modules')]
    setDriverSearchPaths(places)
    const error = await loadDriver(PKG, 'redis', url, importIt).catch((e: unknown) => e)
    assert.ok(error instanceof DriverMissingError)
    assert.match(
      error.message,
      new RegExp(`is not installed beside fencelock \\(.+\\) nor in ${places.join(', ')}:`),
    )
    assert.match(
      error.message,
      new RegExp(`npm install ${PKG} in your project, or npm install -g ${PKG} beside`),
    )
  })

  it('says a driver that is there but fails to load failed, and searches no further', async () => {
    setDriverSearchPaths([global])
    const broken = () => Promise.reject(Object.assign(new Error('bad syntax'), { code: 'ERR_SOMETHING' }))
    const error = await loadDriver(PKG, 'redis', url, broken).catch((e: unknown) => e)
    assert.ok(error instanceof DriverMissingError)
    assert.match(error.message, /which failed to load: bad syntax/)
  })
})
