/**
 * docs/fence-guards.md stays true to the code: every name it imports from a `fencelock/guards/*` entry is
 * exported there (and the entry is in package.json), and the DynamoDB expression it gives is the one
 * test/guards/dynamodb.test.ts runs on DynamoDB Local.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'

// Tests run from build/test/docs; the sources sit at the repository root.
const root = new URL('../../../', import.meta.url)
const page = readFileSync(new URL('docs/fence-guards.md', root), 'utf8')

it('every import from fencelock/guards/* on the page is an export of that entry', async () => {
  const manifest = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as {
    exports: Record<string, unknown>
  }
  const imports = [...page.matchAll(/import \{([^}]+)\} from 'fencelock\/guards\/([a-z]+)'/g)]
  assert.ok(imports.length >= 4, 'the page imports from the guard entries')
  for (const [, names, entry] of imports) {
    assert.ok(manifest.exports[`./guards/${entry}`], `package.json exports ./guards/${entry}`)
    const module = (await import(`../../src/guards/${entry}.js`)) as Record<string, unknown>
    for (const name of names!.split(',').map((n) => n.trim())) {
      assert.equal(typeof module[name], 'function', `fencelock/guards/${entry} exports ${name}`)
    }
  }
})

it('the DynamoDB expressions on the page are the ones tested on DynamoDB Local', () => {
  const tested = readFileSync(new URL('test/guards/dynamodb.test.ts', root), 'utf8')
  for (const field of ['UpdateExpression', 'ConditionExpression', 'ExpressionAttributeNames']) {
    const pattern = new RegExp(`${field}: (.+),\\n`)
    const shown = pattern.exec(page)?.[1]
    assert.ok(shown, `the page gives ${field}`)
    assert.equal(shown, pattern.exec(tested)?.[1], `${field} as tested`)
  }
})
