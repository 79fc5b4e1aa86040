// Every engine vector in tests/vectors, replayed through Engine. The vectors directory comes
// from DLOCK_VECTORS (set by `just node-test`, which runs these tests from a copy).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

import { Engine } from 'dlock'

const dir = process.env.DLOCK_VECTORS ?? join(import.meta.dirname, '..', '..', 'tests', 'vectors')
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort()

test('there are at least 40 vectors', () => {
  assert.ok(files.length >= 40, `only ${files.length} vectors in ${dir}`)
})

for (const file of files) {
  test(`vector ${file}`, () => {
    const vector = JSON.parse(readFileSync(join(dir, file), 'utf8'))
    const engine = new Engine(vector.config, vector.start)
    vector.steps.forEach((step, i) => {
      if ('input' in step) engine.handleInput(step.now, step.input)
      else engine.handleTimeout(step.now)
      const outputs = []
      for (let out; (out = engine.pollOutput()) !== null; ) outputs.push(out)
      const where = `${vector.name} step ${i} (now ${step.now}, fed ${JSON.stringify(step.input ?? 'a timeout')})`
      for (let j = 0; j < Math.max(outputs.length, step.outputs.length); j++) {
        assert.deepStrictEqual(outputs[j], step.outputs[j], `${where}: output ${j} differs`)
      }
      assert.strictEqual(engine.pollTimeout(), step.timeout, `${where}: timeout differs`)
    })
  })
}
