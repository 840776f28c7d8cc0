import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A fresh temporary folder, removed by `cleanup()`. */
export function tempDir(label: string): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), `fencelock-${label}-`))
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) }
}
