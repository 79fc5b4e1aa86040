// The README's Node example runs unchanged against the installed package.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, writeFileSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const project = dirname(dirname(fileURLToPath(import.meta.url)))

test("the README's Node example runs", () => {
  const readme = readFileSync(join(project, 'README.md'), 'utf8')
  const example = /```js\n([\s\S]*?)```/.exec(readme)
  assert.ok(example, 'README.md has no js example')
  writeFileSync(join(project, 'readme-example.cjs'), example[1])
  const run = spawnSync(process.execPath, [join(project, 'readme-example.cjs')], { encoding: 'utf8', timeout: 20_000 })
  assert.equal(run.status, 0, run.stderr)
  assert.match(run.stdout, /holding orders\/42 with fencing token \d+n/)
})
