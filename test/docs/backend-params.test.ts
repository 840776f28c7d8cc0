/**
 * Each backend page's URL parameters against the backend's own schema (`PARAMS`, which `fromUrl` reads):
 * every parameter a backend takes is shown on a URL of its scheme on its page (docs/backends/<page>.md),
 * and every parameter a URL there shows is one its backend takes. Loading the modules needs no server and
 * no driver call.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'
import { backendSchemes } from '../../src/schemes.js'
import { root } from './pages.js'

/** The page that documents each URL scheme. A scheme missing here fails the test: give it a page. */
const PAGE_OF: Readonly<Record<string, string>> = {
  'memory:': 'memory',
  'file:': 'file',
  'redis:': 'redis',
  'rediss:': 'redis',
  'redlock:': 'redlock',
  'etcd:': 'etcd',
  'zookeeper:': 'zookeeper',
  's3:': 's3',
  'gs:': 'gcs',
  'dynamodb:': 'dynamodb',
  'postgres:': 'postgres',
  'postgresql:': 'postgres',
  'mysql:': 'mysql',
  'mariadb:': 'mysql',
}

/** The parameter names the page's `scheme:…?a=…&b=…` URLs (or `[?a=…]` forms) use. */
function shownFor(scheme: string, page: string): Set<string> {
  const shown = new Set<string>()
  for (const url of page.match(new RegExp(`${scheme}[^\\s\`|)]*`, 'g')) ?? []) {
    if (!url.includes('?')) continue
    for (const [, name] of url.slice(url.indexOf('?') + 1).matchAll(/(?:^|&)([A-Za-z]+)=/g)) shown.add(name!)
  }
  return shown
}

it('every URL parameter of every backend is on its page, and no page shows another', async () => {
  // Schemes served by one module (redis:, rediss:) share its parameters: documenting them once will do.
  const byModule = new Map<object, { schemes: string[]; shown: Set<string> }>()
  for (const [scheme, entry] of backendSchemes()) {
    const pageName = PAGE_OF[scheme]
    assert.ok(pageName, `the scheme ${scheme} has no page in docs/backends/ (add it to PAGE_OF)`)
    const page = readFileSync(`${root}docs/backends/${pageName}.md`, 'utf8')
    const { PARAMS } = await entry.load()
    const shown = shownFor(scheme, page)
    for (const name of shown) {
      assert.ok(
        name in PARAMS,
        `docs/backends/${pageName}.md shows ${scheme}…?${name}=, which the backend does not take`,
      )
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
        `${schemes.join(' ')} takes ?${name}= (${spec.doc}), which no URL on its page in docs/backends/ shows`,
      )
    }
  }
})
