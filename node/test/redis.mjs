// A redis-server of the test's own: a free loopback port, a temporary directory, stopped after.
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

function pong(port) {
  return new Promise((resolve) => {
    const c = createConnection({ port, host: '127.0.0.1' })
    c.once('error', () => resolve(false))
    c.once('data', (d) => {
      c.destroy()
      resolve(/^(\+PONG|-NOAUTH)/.test(d.toString()))
    })
    c.write('PING\r\n')
  })
}

export async function startRedis(extra = []) {
  const dir = mkdtempSync(join(tmpdir(), 'dlock-node-'))
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort()
    const child = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir, ...extra], {
      stdio: 'ignore',
    })
    let exited = false
    child.once('exit', () => (exited = true))
    const deadline = Date.now() + 10_000
    while (!exited && Date.now() < deadline) {
      if (await pong(port)) {
        return {
          port,
          url: `redis://127.0.0.1:${port}`,
          cli: (...args) => execFileSync('redis-cli', ['-p', String(port), ...args]).toString().trim(),
          stop() {
            child.kill('SIGKILL')
            rmSync(dir, { recursive: true, force: true })
          },
        }
      }
      await new Promise((r) => setTimeout(r, 10))
    }
    child.kill('SIGKILL')
  }
  throw new Error('redis-server did not start')
}

// Three redis-servers in cluster mode (cluster buses on free ports too), joined by
// `redis-cli --cluster create`; masters only.
export async function startRedisCluster() {
  const nodes = []
  for (let i = 0; i < 3; i++) {
    const bus = await freePort()
    nodes.push(await startRedis(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-port', String(bus), '--cluster-node-timeout', '2000']))
  }
  const stop = () => nodes.forEach((n) => n.stop())
  try {
    execFileSync('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'ignore' })
    const deadline = Date.now() + 30_000
    while (!nodes.every((n) => n.cli('CLUSTER', 'INFO').includes('cluster_state:ok'))) {
      if (Date.now() > deadline) throw new Error('the cluster is not ok after 30 s')
      await new Promise((r) => setTimeout(r, 50))
    }
  } catch (e) {
    stop()
    throw e
  }
  return { url: `redis-cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`, stop }
}
