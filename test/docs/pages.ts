/**
 * The Markdown the project publishes (README.md, CONTRIBUTING.md and every page under docs/), read for the
 * tests that keep it true: its links, its code blocks and its diagrams.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

// Tests run from build/test/docs; the pages sit at the repository root.
export const root = fileURLToPath(new URL('../../../', import.meta.url))

export interface Page {
  /** Relative to the repository root, with `/` separators. */
  readonly path: string
  readonly text: string
}

/**
 * README.md, CONTRIBUTING.md and docs/**\/*.md, less docs/api/: TypeDoc writes those pages from the doc
 * comments, which api.test.ts checks (their examples compiled) and api-reference.test.ts holds them to.
 */
export function pages(): Page[] {
  const paths = ['README.md', 'CONTRIBUTING.md']
  for (const entry of readdirSync(join(root, 'docs'), { withFileTypes: true, recursive: true })) {
    const path = relative(root, join(entry.parentPath, entry.name)).split('\\').join('/')
    if (entry.isFile() && path.endsWith('.md') && !path.startsWith('docs/api/')) paths.push(path)
  }
  return paths.sort().map((path) => ({ path, text: readFileSync(join(root, path), 'utf8') }))
}

export interface CodeBlock {
  readonly page: string
  /** 1-based line of the opening fence. */
  readonly line: number
  readonly lang: string
  /** The block's lines, with the fence's indentation removed (blocks inside list items are indented). */
  readonly code: string
}

/** Every fenced code block of a page, in order. */
export function codeBlocks(page: Page): CodeBlock[] {
  const blocks: CodeBlock[] = []
  const lines = page.text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)```(\S*)\s*$/.exec(lines[i]!)
    if (!open) continue
    const indent = open[1]!
    const body: string[] = []
    let j = i + 1
    while (j < lines.length && lines[j] !== `${indent}\`\`\``) {
      body.push(lines[j]!.startsWith(indent) ? lines[j]!.slice(indent.length) : lines[j]!)
      j++
    }
    if (j === lines.length) throw new Error(`${page.path}:${i + 1}: a code block that never closes`)
    blocks.push({ page: page.path, line: i + 1, lang: open[2]!, code: `${body.join('\n')}\n` })
    i = j
  }
  return blocks
}

/** The text of a page outside its code blocks (where links and headings live). */
export function prose(page: Page): string {
  return page.text.replace(/^( *)```[^\n]*\n[\s\S]*?^\1```$/gm, '')
}
