import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { HistoryEvent } from './history.js'
import { type RunSummary, renderReport, renderTimeline } from './timeline.js'

const T0 = 5_000_000
const PAUSE_TARGET = 'w1 <&> pid'

/**
 * Two workers, three holds. w1's first hold is renewed to 1500, then w1 is paused: w2 takes the lock at
 * 1600 (fence 2) and writes; w1 wakes at 2000, still believing, writes with fence 1 (rejected) and hears
 * of the loss at 2100. w2's first attempt timed out (maybe applied); its last hold lasts 10 ms, too narrow
 * for a label.
 */
function sampleHistory(): HistoryEvent[] {
  const at = (ms: number) => T0 + ms
  const events: HistoryEvent[] = [
    { ev: 'acquire-invoke', t: at(0), client: 'w1', op: 'w1-1', key: 'k', ttlMs: 1000 },
    {
      ev: 'acquire-ok',
      t: at(10),
      client: 'w1',
      op: 'w1-1',
      key: 'k',
      owner: 'o1',
      fence: '1',
      validUntil: at(1010),
    },
    { ev: 'acquire-invoke', t: at(20), client: 'w2', op: 'w2-1', key: 'k', ttlMs: 1000 },
    { ev: 'renew-ok', t: at(500), client: 'w1', op: 'w1-1', validUntil: at(1500) },
    {
      ev: 'acquire-fail',
      t: at(520),
      client: 'w2',
      op: 'w2-1',
      key: 'k',
      definite: false,
      reason: 'timeout',
    },
    { ev: 'fault-start', t: at(600), client: 'nemesis', type: 'pause-holder', target: PAUSE_TARGET },
    { ev: 'acquire-invoke', t: at(600), client: 'w2', op: 'w2-2', key: 'k', ttlMs: 1000 },
    {
      ev: 'acquire-ok',
      t: at(1600),
      client: 'w2',
      op: 'w2-2',
      key: 'k',
      owner: 'o2',
      fence: '2',
      validUntil: at(2600),
    },
    { ev: 'write-invoke', t: at(1700), client: 'w2', op: 'w2-2', key: 'k', fence: '2', value: 'v2' },
    {
      ev: 'write-accepted',
      t: at(1710),
      client: 'resource',
      op: 'w2-2',
      key: 'k',
      fence: '2',
      value: 'v2',
      highest: '0',
    },
    { ev: 'release-invoke', t: at(1800), client: 'w2', op: 'w2-2' },
    { ev: 'release-ok', t: at(1805), client: 'w2', op: 'w2-2', released: true },
    { ev: 'acquire-invoke', t: at(1900), client: 'w2', op: 'w2-3', key: 'k', ttlMs: 1000 },
    { ev: 'fault-end', t: at(2000), client: 'nemesis', type: 'pause-holder', target: PAUSE_TARGET },
    { ev: 'write-invoke', t: at(2040), client: 'w1', op: 'w1-1', key: 'k', fence: '1', value: 'v1' },
    {
      ev: 'write-rejected',
      t: at(2050),
      client: 'resource',
      op: 'w1-1',
      key: 'k',
      fence: '1',
      value: 'v1',
      highest: '2',
    },
    { ev: 'lost', t: at(2100), client: 'w1', op: 'w1-1', reason: 'expired' },
    {
      ev: 'acquire-ok',
      t: at(2200),
      client: 'w2',
      op: 'w2-3',
      key: 'k',
      owner: 'o2',
      fence: '3',
      validUntil: at(3200),
    },
    { ev: 'release-invoke', t: at(2210), client: 'w2', op: 'w2-3' },
    { ev: 'release-ok', t: at(2215), client: 'w2', op: 'w2-3', released: true },
    { ev: 'final-read', t: at(2300), client: 'resource', key: 'k', values: ['v2'] },
  ]
  // The renderer must not rely on the order of the file.
  return events.reverse()
}

/**
 * A tiny well-formedness check: every tag opened is closed in order, and text outside tags holds no raw
 * `<`, `>` or bare `&` (which is what unescaped input would leave). Attribute values are escaped by the
 * renderer, so a `>` never ends a tag early.
 */
function assertWellFormed(markup: string): void {
  const stack: string[] = []
  for (const [, closing, name, selfClosing] of markup.matchAll(/<(\/?)([A-Za-z][\w:-]*)[^<>]*?(\/?)>/g)) {
    if (closing) assert.equal(stack.pop(), name, `</${name}> closes the wrong element`)
    else if (!selfClosing) stack.push(name!)
  }
  assert.deepEqual(stack, [], 'unclosed elements')
  const text = markup.replace(/<!doctype html>/i, '').replace(/<[^<>]*>/g, '')
  assert.doesNotMatch(text, /[<>]/)
  assert.doesNotMatch(markup, /&(?!(amp|lt|gt|quot|#39);)/)
}

function count(text: string, needle: string): number {
  return text.split(needle).length - 1
}

/** The `<g class="…"` elements of a class, each up to its closing tag (none of them nest). */
function groups(svg: string, className: string): string[] {
  return [...svg.matchAll(new RegExp(`<g class="${className}"[^>]*>[\\s\\S]*?</g>`, 'g'))].map((m) => m[0])
}

function attribute(element: string, name: string): number {
  const match = element.match(new RegExp(` ${name}="([^"]*)"`))
  assert.ok(match, `no ${name} in ${element}`)
  return Number(match[1])
}

describe('renderTimeline', () => {
  const svg = renderTimeline(sampleHistory(), { title: 'redis <pause> & "renew"' })

  it('is one well-formed SVG element of the default width', () => {
    assert.match(svg, /^<svg /)
    assert.match(svg, /<\/svg>$/)
    assert.equal(count(svg, '<svg'), 1)
    assert.match(svg, /^<svg [^>]*width="1200"/)
    assertWellFormed(svg)
  })

  it('the well-formedness check catches what it is for', () => {
    assert.throws(() => assertWellFormed('<svg><g></svg>'))
    assert.throws(() => assertWellFormed('<svg><text>a < b</text></svg>'))
    assert.throws(() => assertWellFormed('<svg><text>a & b</text></svg>'))
  })

  it('has one lane per worker, sorted, and no resource lane when every write has its acquire', () => {
    const labels = [...svg.matchAll(/class="lane-label"[^>]*>([^<]*)</g)].map((m) => m[1])
    assert.deepEqual(labels, ['w1', 'w2'])
  })

  it('draws a bar per hold, each with a tooltip naming its op and fence', () => {
    const holds = groups(svg, 'hold')
    assert.equal(holds.length, 3)
    for (const [op, fence, lane] of [
      ['w1-1', '1', 'w1'],
      ['w2-2', '2', 'w2'],
      ['w2-3', '3', 'w2'],
    ]) {
      const matching = holds.filter((hold) => hold.includes(`<title>${op} fence ${fence} `))
      assert.equal(matching.length, 1, `${op} fence ${fence}`)
      assert.match(matching[0]!, new RegExp(`data-lane="${lane}"`))
    }
  })

  it('labels wide bars with their fence and leaves the 10 ms one to its tooltip', () => {
    const labels = [...svg.matchAll(/<text class="fence"[^>]*>([^<]*)</g)].map((m) => m[1])
    assert.deepEqual(labels.sort(), ['1', '2'])
  })

  it('hatches only the stale part of the renewed hold, from the renewed validUntil to the loss', () => {
    assert.equal(count(svg, 'class="stale"'), 1)
    const [w1] = groups(svg, 'hold').filter((hold) => hold.includes('<title>w1-1 '))
    const valid = w1!.match(/<rect class="valid"[^>]*>/)![0]
    const stale = w1!.match(/<rect class="stale"[^>]*>/)![0]
    assert.ok(Math.abs(attribute(valid, 'x') + attribute(valid, 'width') - attribute(stale, 'x')) < 0.2)
    // 10 → 1500 valid (the renewal's deadline, not the first 1010), 1500 → 2100 stale.
    const ratio = attribute(stale, 'width') / attribute(valid, 'width')
    assert.ok(Math.abs(ratio - 600 / 1490) < 0.01, `stale/valid = ${ratio}`)
    assert.match(w1!, /, lost; valid until 1\.500 s; believed held 1\.500 s → 2\.100 s, past validity/)
  })

  it('draws the fault band with its escaped type and target', () => {
    const faults = groups(svg, 'fault')
    assert.equal(faults.length, 1)
    assert.equal(count(faults[0]!, '>pause-holder w1 &lt;&amp;&gt; pid</text>'), 1)
    assert.equal(count(svg, PAUSE_TARGET), 0)
  })

  it('marks each write, loss and indeterminate acquire on its worker lane', () => {
    const marks = [...svg.matchAll(/<g class="mark ([a-z-]+)" data-lane="([^"]*)"/g)].map(
      (m) => `${m[1]}@${m[2]}`,
    )
    assert.deepEqual(marks.sort(), ['acquire-maybe@w2', 'lost@w1', 'write-accepted@w2', 'write-rejected@w1'])
    assert.equal(count(svg, 'class="mark write-rejected"'), 1)
  })

  it('escapes the title', () => {
    assert.equal(count(svg, '>redis &lt;pause&gt; &amp; &quot;renew&quot;</text>'), 1)
  })

  it('pairs fault starts and ends by type and target, in order; an unmatched start runs to the end', () => {
    const fault = (t: number, ev: 'fault-start' | 'fault-end', target: string): HistoryEvent => ({
      ev,
      t,
      client: 'nemesis',
      type: 'partition',
      target,
    })
    const events: HistoryEvent[] = [
      { ev: 'acquire-invoke', t: 0, client: 'w1', op: 'w1-1', key: 'k', ttlMs: 100 },
      fault(100, 'fault-start', 'a'),
      fault(150, 'fault-start', 'b'),
      fault(200, 'fault-end', 'a'),
      fault(300, 'fault-start', 'a'),
      fault(400, 'fault-end', 'a'),
      fault(500, 'fault-end', 'c'),
      { ev: 'acquire-fail', t: 1000, client: 'w1', op: 'w1-1', key: 'k', definite: true, reason: 'locked' },
    ]
    const picture = renderTimeline(events, { title: 'faults', width: 800 })
    assertWellFormed(picture)
    assert.match(picture, /^<svg [^>]*width="800"/)
    const tips = groups(picture, 'fault').map((group) => group.match(/<title>([^<]*)</)![1])
    assert.deepEqual(tips, [
      'partition on a: 0.100 s → 0.200 s',
      'partition on b: 0.150 s → 1.000 s (still on at the end of the run)',
      'partition on a: 0.300 s → 0.400 s',
    ])
    assert.equal(count(picture, 'class="mark'), 0, 'a definite acquire-fail is not marked')
    assert.equal(count(picture, 'class="hold"'), 0)
  })

  it('puts a write whose acquire is not in the history on a resource lane, last', () => {
    const events: HistoryEvent[] = [
      { ev: 'acquire-invoke', t: 0, client: 'w10', op: 'w10-1', key: 'k', ttlMs: 100 },
      { ev: 'acquire-invoke', t: 1, client: 'w2', op: 'w2-1', key: 'k', ttlMs: 100 },
      {
        ev: 'write-rejected',
        t: 5,
        client: 'resource',
        op: 'gone',
        key: 'k',
        fence: '9',
        value: 'v',
        highest: '9',
      },
    ]
    const picture = renderTimeline(events, { title: 'orphan' })
    const labels = [...picture.matchAll(/class="lane-label"[^>]*>([^<]*)</g)].map((m) => m[1])
    assert.deepEqual(labels, ['w2', 'w10', 'resource'])
    assert.equal(count(picture, '<g class="mark write-rejected" data-lane="resource">'), 1)
  })
})

describe('renderReport', () => {
  const runs: RunSummary[] = [
    {
      title: 'redis, pause',
      figures: { holds: 3, 'p99 ms': 12.5, backend: 'redis' },
      svg: renderTimeline(sampleHistory(), { title: 'redis, pause' }),
      verdict: 'ok',
    },
    {
      title: 'unfenced <lost update>',
      figures: { holds: 5, 'lost updates': 1 },
      svg: renderTimeline(sampleHistory(), { title: 'unfenced' }),
      verdict: 'expected',
    },
    {
      title: 'etcd',
      figures: { holds: 2 },
      svg: renderTimeline([], { title: 'etcd' }),
      verdict: 'violation',
    },
  ]
  const html = renderReport(runs, 'Chaos & co')

  it('is one well-formed page without external assets', () => {
    assert.match(html, /^<!doctype html>/)
    assertWellFormed(html)
    assert.doesNotMatch(html, /<link|<script|src=|url\(http/)
    assert.equal(count(html, '<h1>Chaos &amp; co</h1>'), 1)
  })

  it('has a column per figure key (the union) and a row per run', () => {
    const header = html.match(/<thead><tr>([\s\S]*?)<\/tr><\/thead>/)![1]!
    const columns = [...header.matchAll(/<th>([^<]*)<\/th>/g)].map((m) => m[1])
    assert.deepEqual(columns, ['run', 'verdict', 'holds', 'p99 ms', 'backend', 'lost updates'])
    const body = html.match(/<tbody>([\s\S]*?)<\/tbody>/)![1]!
    const rows = body.match(/<tr>[\s\S]*?<\/tr>/g)!
    assert.equal(rows.length, 3)
    assert.equal(count(rows[2]!, '<td></td>'), 3, 'etcd has no p99, backend or lost updates')
    assert.equal(count(rows[1]!, 'unfenced &lt;lost update&gt;'), 1)
  })

  it('colours each verdict by its class, once in the table and once in the run heading', () => {
    for (const verdict of ['ok', 'expected', 'violation']) {
      assert.equal(count(html, `class="verdict verdict-${verdict}"`), 2, verdict)
      assert.equal(count(html, `.verdict-${verdict} {`), 1, `CSS for ${verdict}`)
    }
  })

  it('embeds each run timeline after the table, in order', () => {
    assert.equal(count(html, '<svg '), 3)
    const tableEnd = html.indexOf('</table>')
    const positions = runs.map((run) => html.indexOf(run.svg))
    assert.ok(positions.every((position) => position > tableEnd))
    assert.deepEqual(
      [...positions].sort((a, b) => a - b),
      positions,
    )
  })
})
