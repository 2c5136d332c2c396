// The check of index.d.ts against the declarations napi generates
// (types.js, run by scripts/node-binding) passes on the package as built,
// and catches each kind of disagreement it is there for.
'use strict'

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const { disagreements } = require('../types')

const PACKAGE = path.join(__dirname, '..')

/** The problems found in a copy of the package with index.d.ts edited. */
function withIndexDts(edit) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idmint-types-'))
  try {
    for (const f of ['native.d.ts', 'index.js']) fs.copyFileSync(path.join(PACKAGE, f), path.join(dir, f))
    const text = fs.readFileSync(path.join(PACKAGE, 'index.d.ts'), 'utf8')
    const edited = edit(text)
    assert.notEqual(edited, text, 'the edit changed nothing')
    fs.writeFileSync(path.join(dir, 'index.d.ts'), edited)
    return disagreements(dir)
  } finally {
    fs.rmSync(dir, { recursive: true })
  }
}

test('index.d.ts agrees with what napi generates, and the check sees a difference', () => {
  assert.deepEqual(disagreements(PACKAGE), [])
  const changed = withIndexDts((t) => t.replace('nextIds(key: string, n: number | bigint): BigInt64Array', 'nextIds(key: string, n: number): BigInt64Array'))
  assert.match(changed.join('\n'), /Segments: index\.d\.ts says `nextIds\(key: string, n: number\)/)
  const missing = withIndexDts((t) => t.replace('  readonly maxCount: number\n', ''))
  assert.match(missing.join('\n'), /Segments: index\.d\.ts lacks `readonly maxCount: number`/)
  const extra = withIndexDts((t) => t.replace('  readonly maxCount: number\n', '  readonly maxCount: number\n  flush(): void\n'))
  assert.match(extra.join('\n'), /declares `flush\(\): void`, which the addon lacks/)
})
