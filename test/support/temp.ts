import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A temporary folder of the tests, removed by `cleanup()`. */
export interface TempDir {
  readonly path: string
  cleanup(): void
}

/** A fresh temporary folder, `fencelock-<label>-XXXXXX` in the system's temp folder. */
export function tempDir(label: string): TempDir {
  const path = mkdtempSync(join(tmpdir(), `fencelock-${label}-`))
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) }
}
