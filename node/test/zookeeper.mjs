// A standalone ZooKeeper of the test's own (Debian's package, run with the JVM): a free
// loopback port, a temporary directory, stopped after.
import { spawn } from 'node:child_process'
import { mkdtempSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './redis.mjs'

function serving(port) {
  return new Promise((resolve) => {
    const c = createConnection({ port, host: '127.0.0.1' })
    let text = ''
    c.once('error', () => resolve(false))
    c.on('data', (d) => (text += d))
    c.once('close', () => resolve(text.includes('Mode:')))
    // A server still starting may accept the command and never answer or close: ask again.
    c.setTimeout(1000, () => c.destroy())
    c.write('srvr')
  })
}

export async function startZooKeeper() {
  const dir = mkdtempSync(join(tmpdir(), 'dlock-node-zk-'))
  const port = await freePort()
  mkdirSync(join(dir, 'data'))
  writeFileSync(
    join(dir, 'zoo.cfg'),
    `tickTime=200\ninitLimit=20\nsyncLimit=10\ndataDir=${join(dir, 'data')}\nclientPort=${port}\n` +
      'clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n',
  )
  const log = openSync(join(dir, 'zookeeper.log'), 'w')
  const child = spawn(
    'java',
    ['-Xmx256m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1', '-cp',
      '/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar',
      'org.apache.zookeeper.server.quorum.QuorumPeerMain', join(dir, 'zoo.cfg')],
    { stdio: ['ignore', log, log] },
  )
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (await serving(port)) {
      return {
        url: `zk://127.0.0.1:${port}`,
        stop() {
          child.kill('SIGKILL')
          rmSync(dir, { recursive: true, force: true })
        },
      }
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  child.kill('SIGKILL')
  throw new Error('ZooKeeper did not start')
}
