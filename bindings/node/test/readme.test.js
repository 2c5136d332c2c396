// What the README states against what the library does: the limits of a
// batch, each read from the embedded layer's one constant.
'use strict'

const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')

const { DEFAULT_MAX_COUNT, Generator, MAX_BATCH, Segments } = require('..')
const h = require('./helpers')

const README = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')

/** The numbers the README gives beside `name`, as a set. */
function stated(name) {
  const found = [...README.matchAll(new RegExp('`' + name + '`[^(]*\\(([\\d,]+)\\)', 'g'))]
  assert.ok(found.length > 0, `the README names no \`${name}\` with its value`)
  return new Set(found.map((m) => Number(m[1].replaceAll(',', ''))))
}

test('the README states the generator batch limit', () => {
  assert.deepEqual(stated('MAX_BATCH'), new Set([MAX_BATCH]))
  const g = new Generator({ layout: 'twitter,epoch=2022-02-02', worker: 1 })
  h.throwsCode(() => g.nextIds(MAX_BATCH + 1), 'invalid_count')
  g.close()
})

test('the README states the segment batch limit', (t) => {
  assert.deepEqual(stated('DEFAULT_MAX_COUNT'), new Set([DEFAULT_MAX_COUNT]))
  const dir = h.tmpDir(t)
  const s = Segments.fromConfig(h.writeConfig(dir, '[segment.keys.order]\nstep = 1000\n'))
  assert.equal(s.maxCount, DEFAULT_MAX_COUNT)
  assert.equal(s.nextIds('order', s.maxCount).length, s.maxCount)
  h.throwsCode(() => s.nextIds('order', s.maxCount + 1), 'invalid_count')
  s.close()
})
