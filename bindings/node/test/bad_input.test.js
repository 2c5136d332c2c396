// The shared bad-input vectors (bindings/testdata/bad-input.tsv, rendered
// from idmint-embed): a count or a public-ID setting every language checks
// in embed alone, so each answers with the same code and the same words.
'use strict'

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const { Generator, IdmintError, PublicIds } = require('..')

const KEY = '000102030405060708090a0b0c0d0e0f'
const OPTION = { bits: 'bits', key_id_bits: 'keyIdBits', active_key: 'activeKey' }

const vectors = fs
  .readFileSync(path.join(__dirname, '..', '..', 'testdata', 'bad-input.tsv'), 'utf8')
  .split('\n')
  .filter((l) => l !== '' && !l.startsWith('#'))
  .map((l) => l.split('\t'))

test('bad input is answered with the code and words of every language', () => {
  assert.ok(vectors.length >= 6)
  const g = new Generator()
  try {
    for (const [kase, value, code, message] of vectors) {
      const n = Number(value)
      let call
      if (kase === 'next_ids') call = () => g.nextIds(n)
      else if (kase.startsWith('public_ids.')) {
        call = () => new PublicIds(KEY, { [OPTION[kase.slice('public_ids.'.length)]]: n })
      } else assert.fail(`unknown case ${kase}`)
      assert.throws(call, (e) => {
        assert.ok(e instanceof IdmintError, `${kase} ${value}: ${e}`)
        assert.equal(e.code, code, `${kase} ${value}`)
        assert.equal(e.message, `${code}: ${message}`, `${kase} ${value}`)
        return true
      })
      if (kase === 'next_ids') {
        // A bigint count is read by the same check.
        assert.throws(() => g.nextIds(BigInt(value)), (e) => e.message === `${code}: ${message}`)
      }
    }
  } finally {
    g.close()
  }
})
