import { pathToFileURL } from 'node:url'
import { fileBackend } from '../../src/backends/file/index.js'
import { createLockClient } from '../../src/index.js'
import { defineConformanceSuite } from '../conformance/suite.js'
import { tempDir } from '../support/temp.js'

const dir = tempDir('file-conformance')
const url = pathToFileURL(dir.path).href

defineConformanceSuite({
  name: 'file',
  url: () => url,
  createClient: (options) => createLockClient(url, options),
  breakLease: (key) => fileBackend({ dir: dir.path }).breakLock(key),
  teardown: async () => dir.cleanup(),
})
