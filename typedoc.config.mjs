// The API reference (docs/api/, `npm run docs:api`): one Markdown page per entry point of package.json's
// `exports`, so a new subpath gets its page without editing this file. test/docs/api-reference.test.ts
// regenerates it and fails when the committed pages differ.
import { readFileSync } from 'node:fs'

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'))
const entryPoints = Object.values(pkg.exports)
  .filter((target) => typeof target === 'object' && target.types)
  .map((target) => target.types.replace(/^\.\/dist\/(.+)\.d\.ts$/, './src/$1.ts'))

/** @type {Partial<import('typedoc').TypeDocOptions & import('typedoc-plugin-markdown').PluginOptions>} */
export default {
  entryPoints,
  tsconfig: './tsconfig.build.json',
  plugin: ['typedoc-plugin-markdown'],
  out: 'docs/api',
  outputFileStrategy: 'modules',
  excludeInternal: true,
  excludePrivate: true,
  // Source links would name a commit and change on every one; the pages name the symbols instead.
  disableSources: true,
  hideGenerator: true,
  readme: 'none',
  // Types the entry points use without exporting them (engine drivers' records) are named, not linked.
  validation: { notExported: false },
}
