/**
 * Every relative link of README.md, CONTRIBUTING.md and docs/ resolves: the file exists, and a `#fragment`
 * into a Markdown page names one of its headings (slugged as GitHub and npm do). Links to other sites are
 * not followed (the tests reach no network).
 */
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { it } from 'node:test'
import { type Page, pages, prose, root } from './pages.js'

/** GitHub's heading anchor: lower case, punctuation dropped (but `-` and `_`), spaces to `-`. */
export function slug(heading: string): string {
  return heading
    .replace(/`|\*\*|\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-')
}

/** The anchors a page's headings make (a repeated heading gets `-1`, `-2`, … as on GitHub). */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const [, heading] of prose({ path: '', text }).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = slug(heading!)
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

/** Every `[text](target)` and `<a href>`-free Markdown link outside code blocks and code spans. */
function links(page: Page): string[] {
  const text = prose(page).replace(/`[^`\n]*`/g, '')
  return [...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!)
}

it('slugs headings as GitHub does', () => {
  assert.equal(slug('Guarantees, in short'), 'guarantees-in-short')
  assert.equal(slug('`fencelock run`'), 'fencelock-run')
  assert.equal(slug('S3, GCS and DynamoDB'), 's3-gcs-and-dynamodb')
  assert.equal(slug('Redis, Redlock, etcd, file and memory'), 'redis-redlock-etcd-file-and-memory')
})

it('every relative link in README.md, CONTRIBUTING.md and docs/ resolves', () => {
  const broken: string[] = []
  const all = pages()
  assert.ok(all.length >= 20, `only ${all.length} pages found`)
  for (const page of all) {
    for (const target of links(page)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto:: another site
      const [file, fragment] = target.split('#') as [string, string | undefined]
      const path = file === '' ? page.path : normalize(join(dirname(page.path), decodeURIComponent(file)))
      if (!existsSync(join(root, path))) {
        broken.push(`${page.path}: ${target} (no file ${path})`)
        continue
      }
      if (fragment !== undefined && path.endsWith('.md')) {
        const text = readFileSync(join(root, path), 'utf8')
        if (!anchors(text).has(fragment))
          broken.push(`${page.path}: ${target} (no heading #${fragment} in ${path})`)
      }
    }
  }
  assert.deepEqual(broken, [], `broken links:\n${broken.join('\n')}`)
})

it('every page under docs/ is reached from the README, directly or through other pages', () => {
  const all = new Map(pages().map((p) => [p.path, p]))
  const reached = new Set<string>(['README.md'])
  const queue = ['README.md']
  while (queue.length > 0) {
    const page = all.get(queue.shift()!)
    if (!page) continue
    for (const target of links(page)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue
      const file = target.split('#')[0]!
      if (file === '') continue
      const path = normalize(join(dirname(page.path), decodeURIComponent(file)))
        .split('\\')
        .join('/')
      if (!reached.has(path)) {
        reached.add(path)
        queue.push(path)
      }
    }
  }
  const unreached = [...all.keys()].filter((p) => p.startsWith('docs/') && !reached.has(p))
  assert.deepEqual(unreached, [], `pages no link reaches from the README: ${unreached.join(', ')}`)
})
