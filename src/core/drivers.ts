/**
 * Where a backend's driver (an optional peer dependency such as ioredis) is found.
 *
 * A backend imports its driver by name (`import('ioredis')`), and Node resolves that from fencelock's own
 * files only: the node_modules folders above the real path of fencelock's files. That finds a driver
 * installed beside fencelock, in the same project or the same global folder
 * (`<prefix>/lib/node_modules/{fencelock,ioredis}`). It does not find one installed in the project a global
 * fencelock is run from, nor a global one when fencelock runs from npx's cache
 * (`~/.npm/_npx/<hash>/node_modules/fencelock`) or from a linked folder (`npm link`,
 * `npm install -g <folder>`: the real path is the folder, outside the global node_modules).
 *
 * An application that imports fencelock has its drivers beside it, so the library looks nowhere else. The
 * CLI adds the places a command-line user means (the current project, the global folders) with
 * `setDriverSearchPaths`; they are searched only when the plain import finds nothing.
 */

import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { basename, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

let searchPaths: readonly string[] = []

/**
 * Sets the folders a driver is looked for in when it is not installed beside fencelock, in order. A
 * project folder is searched as if a module in it imported the driver: its node_modules, then its
 * parents'. A node_modules folder itself (a global folder, a NODE_PATH entry) must hold the package: its
 * parents are not searched, since they belong to whatever tree it happens to sit in (a node unpacked into
 * some project would otherwise find that project's drivers).
 * @example
 * setDriverSearchPaths([process.cwd(), '/usr/lib/node_modules'])
 */
export function setDriverSearchPaths(paths: readonly string[]): void {
  searchPaths = [...paths]
}

/** fencelock's own folder: Node looks for drivers in its node_modules and its parents' first. */
const OWN_FOLDER = resolve(fileURLToPath(new URL('../..', import.meta.url)))

/** Whether `error` says that `pkg` itself is not installed (not a module it needs in turn). */
function isNotFound(pkg: string, error: unknown): boolean {
  const e = error as NodeJS.ErrnoException | undefined
  return e?.code === 'ERR_MODULE_NOT_FOUND' && String(e.message).includes(`'${pkg}'`)
}

/**
 * Imports a driver with `load` (the backend's own literal `import('…')`), else, when that finds no such
 * package, from the first search path that has it, by file URL.
 * @throws the error of `load` when no search path has it either
 */
export async function importDriver<T>(pkg: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load()
  } catch (error) {
    if (!isNotFound(pkg, error)) throw error
    for (const folder of searchPaths) {
      if (basename(folder) === 'node_modules' && !existsSync(join(folder, pkg))) continue
      let file: string
      try {
        // CommonJS resolution, as no ESM API resolves from a given folder on Node 20 (import.meta.resolve
        // ignores its parent there): it picks the package's "require" entry, which is all ioredis and etcd3
        // have.
        file = createRequire(join(folder, 'noop.js')).resolve(pkg)
      } catch {
        continue
      }
      return (await import(pathToFileURL(file).href)) as T
    }
    throw error
  }
}

/**
 * The end of a "needs the <pkg> package, which …" sentence when `error` says it is not installed: where it
 * was looked for and what to run. Undefined for any other error (the package is there but failed to load).
 */
export function notFoundText(pkg: string, error: unknown): string | undefined {
  if (!isNotFound(pkg, error)) return undefined
  if (searchPaths.length === 0) return `is not installed: npm install ${pkg}`
  return (
    `is not installed beside fencelock (${OWN_FOLDER}) nor in ${searchPaths.join(', ')}: run ` +
    `npm install ${pkg} in your project, or npm install -g ${pkg} beside a global fencelock`
  )
}
