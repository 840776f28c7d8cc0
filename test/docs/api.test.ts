/**
 * The API reference is generated from the doc comments (docs/api/), so every public export of every entry
 * point in package.json's `exports` has one, and so do the public members of the exported classes and
 * interfaces that fencelock declares (inherited members of Error or AbortSignal are documented upstream),
 * except what is marked `@internal` (exported for the tests only).
 * Every `@example` compiles, with the exports of `fencelock` and of its own entry point in scope and the
 * names of compile.ts's prelude (`locks`, `lock`, `sql`, `body`) given: CONTRIBUTING.md, "Doc comments".
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import ts from 'typescript'
import { compileSamples, type EntryPoint, entryPoints, type Sample } from './compile.js'
import { root } from './pages.js'

interface Documented {
  /** `fencelock/redis redisBackend`, `fencelock Lock.extend`. */
  readonly where: string
  readonly entry: EntryPoint
  readonly symbol: ts.Symbol
}

/** Every exported symbol, and every public member fencelock declares of an exported class or interface. */
function publicApi(): { api: Documented[]; exportsOf: Map<string, string[]>; checker: ts.TypeChecker } {
  const entries = entryPoints()
  const program = ts.createProgram(
    entries.map((e) => e.source),
    {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      skipLibCheck: true,
      noEmit: true,
      types: ['node'],
      typeRoots: [join(root, 'node_modules', '@types')],
    },
  )
  const checker = program.getTypeChecker()
  const src = join(root, 'src')
  const seen = new Set<ts.Symbol>()
  const api: Documented[] = []
  const exportsOf = new Map<string, string[]>()
  for (const entry of entries) {
    const file = program.getSourceFile(entry.source)
    assert.ok(file, `${entry.specifier}: ${entry.source} not found`)
    const module = checker.getSymbolAtLocation(file)
    assert.ok(module, `${entry.specifier}: ${entry.source} exports nothing`)
    const exported = checker.getExportsOfModule(module)
    exportsOf.set(
      entry.specifier,
      exported.map((s) => s.name),
    )
    for (const alias of exported) {
      const symbol = alias.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(alias) : alias
      if (seen.has(symbol) || isInternal(symbol)) continue
      seen.add(symbol)
      api.push({ where: `${entry.specifier} ${alias.name}`, entry, symbol })
      if (!(symbol.flags & (ts.SymbolFlags.Class | ts.SymbolFlags.Interface))) continue
      for (const member of checker.getPropertiesOfType(checker.getDeclaredTypeOfSymbol(symbol))) {
        const declarations = member.declarations ?? []
        const ours = declarations.some((d) => d.getSourceFile().fileName.startsWith(src))
        const hidden = declarations.some(
          (d) =>
            // An override (an error's `name`, `code`) shares its base's doc, as TypeDoc shows it.
            ts.getCombinedModifierFlags(d) &
              (ts.ModifierFlags.Private | ts.ModifierFlags.Protected | ts.ModifierFlags.Override) ||
            (d as ts.NamedDeclaration).name?.kind === ts.SyntaxKind.PrivateIdentifier,
        )
        if (!ours || hidden || seen.has(member) || isInternal(member)) continue
        seen.add(member)
        api.push({ where: `${entry.specifier} ${alias.name}.${member.name}`, entry, symbol: member })
      }
    }
  }
  return { api, exportsOf, checker }
}

/** Marked `@internal`: exported for the tests, left out of the reference (TypeDoc's `excludeInternal`). */
function isInternal(symbol: ts.Symbol): boolean {
  return (symbol.declarations ?? []).some((d) =>
    ts.getJSDocTags(d).some((t) => t.tagName.text === 'internal'),
  )
}

/** The code of an `@example`: its fenced block if it has one, else the whole text (as TypeDoc reads it). */
function exampleCode(text: string): string {
  const fenced = /```[^\n]*\n([\s\S]*?)```/.exec(text)
  return `${(fenced ? fenced[1]! : text).trim()}\n`
}

/** The names a sample declares or imports at its top level (the prelude must not import them again). */
function ownNames(code: string): Set<string> {
  const names = new Set<string>()
  const file = ts.createSourceFile('sample.ts', code, ts.ScriptTarget.ES2022)
  for (const statement of file.statements) {
    if (ts.isImportDeclaration(statement)) {
      const clause = statement.importClause
      if (clause?.name) names.add(clause.name.text)
      const bindings = clause?.namedBindings
      if (bindings && ts.isNamespaceImport(bindings)) names.add(bindings.name.text)
      if (bindings && ts.isNamedImports(bindings)) for (const e of bindings.elements) names.add(e.name.text)
    } else if (ts.isVariableStatement(statement)) {
      for (const d of statement.declarationList.declarations)
        if (ts.isIdentifier(d.name)) names.add(d.name.text)
    } else if ((ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement)) && statement.name) {
      names.add(statement.name.text)
    }
  }
  return names
}

describe('the public API', () => {
  const { api, exportsOf, checker } = publicApi()

  it('covers every entry point of package.json', () => {
    assert.ok(api.length >= 50, `only ${api.length} public symbols found`)
    for (const [specifier, names] of exportsOf) assert.ok(names.length > 0, `${specifier} exports nothing`)
  })

  it('has a doc comment on every export and on every public member', () => {
    const undocumented = api
      .filter((d) => ts.displayPartsToString(d.symbol.getDocumentationComment(checker)).trim() === '')
      .map((d) => d.where)
    assert.deepEqual(undocumented, [], 'add a /** … */ sentence to each (it is the API reference)')
  })

  it('compiles every @example', () => {
    const samples: Sample[] = []
    for (const d of api) {
      for (const tag of d.symbol.getJsDocTags(checker)) {
        if (tag.name !== 'example') continue
        const code = exampleCode(ts.displayPartsToString(tag.text))
        const own = ownNames(code)
        const prelude = [exportsOf.get('fencelock')!, exportsOf.get(d.entry.specifier)!].map((names, i) => {
          const from = i === 0 ? 'fencelock' : d.entry.specifier
          const wanted = names.filter((n) => !own.has(n))
          return wanted.length > 0 ? `import { ${wanted.join(', ')} } from '${from}'\n` : ''
        })
        const imports = d.entry.specifier === 'fencelock' ? prelude[0]! : prelude.join('')
        samples.push({ where: d.where, code: `${imports}${code}`, lang: 'ts' })
      }
    }
    assert.ok(samples.length >= 10, `only ${samples.length} @examples found`)
    assert.deepEqual(compileSamples(samples, 'api-examples'), [])
  })
})
