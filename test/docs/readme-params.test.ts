/**
 * The README's URL parameters against the backends' own schemas (`PARAMS`, which `fromUrl` reads): every
 * parameter a backend takes is documented on a URL of its scheme, and every parameter a documented URL
 * shows is one its backend takes. Loading the modules needs no server and no driver call.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'
import { backendSchemes } from '../../src/schemes.js'

const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')

/** The parameter names the README's `scheme:…?a=…&b=…` URLs (or `[?a=…]` forms) use. */
function shownFor(scheme: string): Set<string> {
  const shown = new Set<string>()
  for (const url of readme.match(new RegExp(`${scheme}[^\\s\`|)]*`, 'g')) ?? []) {
    if (!url.includes('?')) continue
    for (const [, name] of url.slice(url.indexOf('?') + 1).matchAll(/(?:^|&)([A-Za-z]+)=/g)) shown.add(name!)
  }
  return shown
}

it('every URL parameter of every backend is in the README, and the README shows no other', async () => {
  // Schemes served by one module (redis:, rediss:) share its parameters: documenting them once will do.
  const byModule = new Map<object, { schemes: string[]; shown: Set<string> }>()
  for (const [scheme, entry] of backendSchemes()) {
    const { PARAMS } = await entry.load()
    const shown = shownFor(scheme)
    for (const name of shown) {
      assert.ok(name in PARAMS, `the README shows ${scheme}…?${name}=, which the backend does not take`)
    }
    const group = byModule.get(PARAMS) ?? { schemes: [], shown: new Set<string>() }
    group.schemes.push(scheme)
    for (const name of shown) group.shown.add(name)
    byModule.set(PARAMS, group)
  }
  assert.ok(byModule.size >= 5, `only ${byModule.size} backend modules found`)
  for (const [PARAMS, { schemes, shown }] of byModule) {
    for (const [name, spec] of Object.entries(PARAMS as Record<string, { doc: string }>)) {
      assert.ok(
        shown.has(name),
        `${schemes.join(' ')} takes ?${name}= (${spec.doc}), which no README URL shows`,
      )
    }
  }
})
