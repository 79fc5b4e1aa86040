// One client leads and proclaims again; another observes each change and the free lock: the
// election test every backend's suite runs (docs/PROTOCOL.md §20).
import assert from 'node:assert/strict'

import { connect } from 'dlock'

export async function aLeaderIsObserved(url, name) {
  const [a, b] = [await connect(url), await connect(url)]
  const changes = b.election(name).observe()[Symbol.asyncIterator]()
  const next = async () => (await changes.next()).value
  assert.equal(await next(), null)
  const lead = await a.election(name).campaign('a')
  assert.deepEqual(await next(), { term: lead.term, value: 'a' })
  await lead.proclaim('a2')
  assert.deepEqual(await next(), { term: lead.term, value: 'a2' })
  assert.deepEqual(await b.election(name).leader(), { term: lead.term, value: 'a2' })
  await lead.resign()
  assert.equal(await next(), null)
  await changes.return()
  await a.close()
  await b.close()
}
