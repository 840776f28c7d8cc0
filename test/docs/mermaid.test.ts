/**
 * Every ```mermaid block in README.md, CONTRIBUTING.md and docs/ parses, by a structural check of the
 * sequence-diagram grammar the pages use: no Mermaid parser is installable here (the `mermaid` package
 * needs a DOM, `@mermaid-js/parser` has no sequence diagrams), so this checks what breaks a diagram on
 * GitHub and npm: the header, every statement's shape, messages between declared participants, blocks
 * (`loop`, `alt`/`else`, `opt`, `par`/`and`, …) opened and closed in order, and no character that ends a
 * statement or starts an entity code inside a text (`;`, `#`).
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { codeBlocks, pages } from './pages.js'

const OPENERS = new Set(['loop', 'alt', 'opt', 'par', 'critical', 'break', 'rect'])
/** The words that may continue a block, and the block they belong to. */
const CONTINUERS: Readonly<Record<string, readonly string[]>> = {
  else: ['alt'],
  and: ['par'],
  option: ['critical'],
}
const ARROW = /^([A-Za-z][\w]*)\s*(->>|-->>|->|-->|-x|--x|-\)|--\))\s*([+-]?)([A-Za-z][\w]*)\s*:\s*(.+)$/
const NOTE = /^Note\s+(over|left of|right of)\s+([A-Za-z]\w*)(?:\s*,\s*([A-Za-z]\w*))?\s*:\s*(.+)$/
const PARTICIPANT = /^(participant|actor)\s+([A-Za-z]\w*)(?:\s+as\s+(.+))?$/

/** The problems of one sequence diagram, empty when it parses. */
export function checkSequenceDiagram(source: string): string[] {
  const problems: string[] = []
  const lines = source.split('\n').map((l) => l.trim())
  const [header, ...body] = lines
  if (header !== 'sequenceDiagram')
    return [`the first line is ${JSON.stringify(header)}, not sequenceDiagram`]
  const declared = new Set<string>()
  const open: string[] = []
  body.forEach((line, index) => {
    const where = `line ${index + 2}`
    if (line === '' || line.startsWith('%%') || line === 'autonumber') return
    const text = (t: string | undefined) => {
      if (t !== undefined && /[;#]/.test(t)) problems.push(`${where}: ";" or "#" in ${JSON.stringify(t)}`)
    }
    const word = line.split(/\s+/)[0]!
    const participant = PARTICIPANT.exec(line)
    if (participant) {
      if (declared.has(participant[2]!)) problems.push(`${where}: ${participant[2]} declared twice`)
      declared.add(participant[2]!)
      text(participant[3])
      return
    }
    const arrow = ARROW.exec(line)
    if (arrow) {
      for (const name of [arrow[1]!, arrow[4]!]) {
        if (!declared.has(name)) problems.push(`${where}: message names ${name}, never declared`)
      }
      text(arrow[5])
      return
    }
    const note = NOTE.exec(line)
    if (note) {
      for (const name of [note[2], note[3]]) {
        if (name !== undefined && !declared.has(name))
          problems.push(`${where}: note over ${name}, never declared`)
      }
      text(note[4])
      return
    }
    if (OPENERS.has(word)) {
      open.push(word)
      text(line.slice(word.length))
      return
    }
    if (word in CONTINUERS) {
      const top = open.at(-1)
      if (top === undefined || !CONTINUERS[word]!.includes(top))
        problems.push(`${where}: ${word} outside ${CONTINUERS[word]}`)
      text(line.slice(word.length))
      return
    }
    if (line === 'end') {
      if (open.pop() === undefined) problems.push(`${where}: end without a block to close`)
      return
    }
    problems.push(`${where}: not a statement of a sequence diagram: ${JSON.stringify(line)}`)
  })
  if (open.length > 0) problems.push(`blocks never closed: ${open.join(', ')}`)
  return problems
}

it('the check refuses what breaks a diagram', () => {
  assert.deepEqual(checkSequenceDiagram('sequenceDiagram\n    participant A\n    A->>A: fine'), [])
  assert.equal(checkSequenceDiagram('flowchart LR\n  a --> b').length, 1)
  assert.match(
    checkSequenceDiagram('sequenceDiagram\n participant A\n A->>B: hi').join(),
    /B, never declared/,
  )
  assert.match(
    checkSequenceDiagram('sequenceDiagram\n participant A\n loop x\n A->>A: y').join(),
    /never closed/,
  )
  assert.match(checkSequenceDiagram('sequenceDiagram\n participant A\n A->>A: a; b').join(), /";"/)
  assert.match(checkSequenceDiagram('sequenceDiagram\n participant A\n else').join(), /else outside/)
  assert.match(checkSequenceDiagram('sequenceDiagram\n participant A\n A=>A: x').join(), /not a statement/)
})

it('every mermaid diagram in the docs parses', () => {
  const diagrams = pages()
    .flatMap(codeBlocks)
    .filter((b) => b.lang === 'mermaid')
  // One per algorithm family: queue, quorum, conditional-write lease, lease row, Redis scripts, file generations.
  assert.ok(diagrams.length >= 6, `only ${diagrams.length} mermaid diagrams found`)
  const problems = diagrams.flatMap((d) =>
    checkSequenceDiagram(d.code.trimEnd()).map((p) => `${d.page}:${d.line}: ${p}`),
  )
  assert.deepEqual(problems, [])
})
