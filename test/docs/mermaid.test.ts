/**
 * Every ```mermaid block in README.md, CONTRIBUTING.md and docs/ parses with Mermaid's own parser, and a
 * failure names the page, the line and Mermaid's error.
 *
 * Mermaid needs a DOM only for DOMPurify, which it builds from the global `window` when it loads (without
 * one, a diagram with a title or any flowchart throws "DOMPurify.addHook is not a function"): a jsdom
 * window is set before the one import of Mermaid, shared by every block.
 *
 * Sequence diagrams then get the checks of what the parser accepts but draws wrong: a message or note to a
 * participant never declared (a misspelt name draws a new lifeline), a participant declared twice, and a
 * `;` or `#` outside a comment (`;` ends the statement, so the rest of a message becomes a statement of its
 * own; `#…;` is an entity code).
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { JSDOM } from 'jsdom'
import { type CodeBlock, codeBlocks, pages } from './pages.js'

Object.assign(globalThis, { window: new JSDOM('').window })
const { default: mermaid } = await import('mermaid')

const DECLARATION = /^(?:create\s+)?(?:participant|actor)\s+([^\s]+)/

/** The problems of the diagrams, each as `page:line: problem`; empty when all parse and pass the checks. */
async function diagramProblems(diagrams: readonly CodeBlock[]): Promise<string[]> {
  const problems: string[] = []
  for (const diagram of diagrams) {
    const at = (blockLine: number) => `${diagram.page}:${diagram.line + blockLine}`
    let type: string
    try {
      ;({ diagramType: type } = await mermaid.parse(diagram.code))
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error)
      // Mermaid numbers the lines of the block, an error at its end past the last one (then the closing
      // fence is named); a message without a line names the opening fence.
      const line = Number(/\bline (\d+)/.exec(message)?.[1] ?? 0)
      problems.push(`${at(Math.min(line, diagram.code.split('\n').length))}: ${message}`)
      continue
    }
    if (type === 'sequence')
      problems.push(...(await sequenceProblems(diagram.code)).map((p) => `${at(p.line)}: ${p.problem}`))
  }
  return problems
}

/** What the parser accepts in a sequence diagram but draws wrong (the header comment lists it). */
async function sequenceProblems(code: string): Promise<{ line: number; problem: string }[]> {
  const problems: { line: number; problem: string }[] = []
  const declared = new Set<string>()
  const lines = code.split('\n')
  lines.forEach((raw, index) => {
    const line = raw.trim()
    if (line.startsWith('%%')) return
    const name = DECLARATION.exec(line)?.[1]
    if (name !== undefined) {
      if (declared.has(name)) problems.push({ line: index + 1, problem: `${name} declared twice` })
      declared.add(name)
    }
    if (/[;#]/.test(line))
      problems.push({ line: index + 1, problem: `";" or "#" in ${JSON.stringify(line)}` })
  })
  const { db } = await mermaid.mermaidAPI.getDiagramFromText(code)
  for (const actor of (db as { getActorKeys(): string[] }).getActorKeys()) {
    if (declared.has(actor)) continue
    // The first line naming it (Mermaid gives none); names are words, so a word search finds it.
    const first = lines.findIndex((l) => l.split(/[^\w]+/).includes(actor))
    problems.push({
      line: first + 1,
      problem: `${actor} is in a message or a note but never declared (a misspelt name?)`,
    })
  }
  return problems
}

const block = (code: string): CodeBlock => ({ page: 'broken.md', line: 10, lang: 'mermaid', code })

it('the check refuses what breaks a diagram, naming the page, the line and the error', async () => {
  assert.deepEqual(await diagramProblems([block('sequenceDiagram\n  participant A\n  A->>A: fine\n')]), [])
  // Needs DOMPurify, so the DOM: a diagram of another type, with a title, parses too.
  assert.deepEqual(await diagramProblems([block('flowchart LR\n  a["<b>x</b>"] --> b\n')]), [])
  assert.deepEqual(await diagramProblems([block('sequenceDiagram\n  title T\n  participant A\n')]), [])
  const [arrow, ...others] = await diagramProblems([block('sequenceDiagram\n  participant A\n  A=>A: x\n')])
  assert.deepEqual(others, [])
  assert.match(arrow!, /^broken\.md:13: Parse error on line 3:/)
  assert.match(
    (await diagramProblems([block('sequenceDiagram\n  participant A\n  loop x\n    A->>A: y\n')])).join(),
    /^broken\.md:15: Parse error/,
  )
  assert.match((await diagramProblems([block('flowchart LR\n  a --> b --> \n')])).join(), /^broken\.md:\d+: /)
  assert.deepEqual(await diagramProblems([block('sequenceDiagram\n  participant A\n  A->>B: hi\n')]), [
    'broken.md:13: B is in a message or a note but never declared (a misspelt name?)',
  ])
  assert.match(
    (await diagramProblems([block('sequenceDiagram\n  participant A\n  A->>A: a; A->>A: b\n')])).join(),
    /^broken\.md:13: ";" or "#"/,
  )
  assert.match(
    (await diagramProblems([block('sequenceDiagram\n  participant A\n  participant A\n')])).join(),
    /^broken\.md:13: A declared twice/,
  )
})

it('every mermaid diagram in the docs parses', async () => {
  const diagrams = pages()
    .flatMap(codeBlocks)
    .filter((b) => b.lang === 'mermaid')
  // One per algorithm family: queue, quorum, conditional-write lease, lease row, Redis scripts, file generations.
  assert.ok(diagrams.length >= 6, `only ${diagrams.length} mermaid diagrams found`)
  assert.deepEqual(await diagramProblems(diagrams), [])
})
