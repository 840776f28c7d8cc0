/**
 * Writes a CommonJS-flavoured copy of every declaration file of dist: `x.d.ts` → `x.d.cts`, with each
 * relative specifier `./y.js` → `./y.cjs` (TypeScript maps that to `./y.d.cts`). Run by `npm run build`,
 * after tsc.
 *
 * fencelock ships one ES module build; Node ≥ 20.19 loads it with `require()` too, as the same single
 * copy (no second copy of the named memory stores or of the error classes that `instanceof` checks). But
 * TypeScript under `module: node16`/`node18` refuses any `require` of a file it knows is ESM (TS1479),
 * and a `type: module` package's `.d.ts` is ESM. package.json's `require` condition therefore points
 * the types at these `.d.cts` copies, which describe what `require()` returns: the same named exports.
 * A one-line `export * from './index.js'` facade does not do: TypeScript reports TS1479 inside it.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const DIST = process.argv[2] ?? 'dist'
/** A quoted relative specifier ending in `.js`, as tsc writes them in `from '…'` and `import('…')`. */
const RELATIVE_JS = /(['"])(\.{1,2}\/[^'"\n]*?)\.js\1/g

let count = 0
for (const entry of readdirSync(DIST, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith('.d.ts')) continue
  const file = join(entry.parentPath ?? entry.path, entry.name)
  const text = readFileSync(file, 'utf8').replace(RELATIVE_JS, '$1$2.cjs$1')
  writeFileSync(file.replace(/\.d\.ts$/, '.d.cts'), text)
  count++
}
// Silent on success: `npm pack --json` runs this (prepack) and its stdout must stay JSON.
if (count === 0) throw new Error(`no .d.ts file under ${DIST}: run tsc -p tsconfig.build.json first`)
