//! A TCP proxy on a free loopback port in front of a server, for faults between a client and
//! its server: a black hole (bytes are swallowed, connections stay open), a stall (bytes wait
//! in the proxy and flow again when it ends, as TCP delivers after a partition heals), added
//! latency, a new target for new connections (a failover behind a fixed address), and — in
//! front of ZooKeeper — cutting a connection right after a create request went through, so
//! that its reply is lost.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    target: AtomicU16,
    blackhole: AtomicBool,
    stalled: AtomicBool,
    delay_us: AtomicU64,
    cut_after_create: AtomicBool,
    cuts: AtomicU64,
    streams: Mutex<Vec<TcpStream>>,
}

/// Forwards `127.0.0.1:port()` to a target port until dropped.
#[derive(Debug)]
pub struct TcpProxy {
    port: u16,
    state: Arc<State>,
}

/// ZooKeeper request types that create a node: create, create2, createContainer, createTTL.
const ZK_CREATES: [i32; 4] = [1, 15, 19, 21];

impl TcpProxy {
    /// A proxy for any protocol: bytes pass as they come.
    pub fn start(target: u16) -> Self {
        Self::spawn(target, false)
    }

    /// A proxy that reads ZooKeeper's frames from the client, for
    /// [`cut_after_next_create`](Self::cut_after_next_create).
    pub fn start_zookeeper(target: u16) -> Self {
        Self::spawn(target, true)
    }

    fn spawn(target: u16, zookeeper: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State::default());
        state.target.store(target, Ordering::SeqCst);
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let target = shared.target.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let Ok(mut streams) = shared.streams.lock() {
                    streams.extend(
                        [client.try_clone(), server.try_clone()]
                            .into_iter()
                            .flatten(),
                    );
                }
                let (c2, s2) = (client.try_clone(), server.try_clone());
                let (Ok(c2), Ok(s2)) = (c2, s2) else { continue };
                let up = shared.clone();
                if zookeeper {
                    std::thread::spawn(move || upstream(client, server, up));
                } else {
                    std::thread::spawn(move || pump(client, server, &up));
                }
                let down = shared.clone();
                std::thread::spawn(move || pump(s2, c2, &down));
            }
        });
        TcpProxy { port, state }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends new connections to `port` from now on (connections already made stay).
    pub fn retarget(&self, port: u16) {
        self.state.target.store(port, Ordering::SeqCst);
    }

    /// Swallows every byte both ways (`true`) or forwards again (`false`).
    pub fn blackhole(&self, on: bool) {
        self.state.blackhole.store(on, Ordering::SeqCst);
    }

    /// Holds every byte both ways in the proxy (`true`) until released (`false`); new
    /// connections are accepted but stall too.
    pub fn stall(&self, on: bool) {
        self.state.stalled.store(on, Ordering::SeqCst);
    }

    /// Delays every chunk of bytes by `delay` each way (zero: none).
    pub fn delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.state.delay_us.store(us, Ordering::SeqCst);
    }

    /// Arms a one-shot fault: the next ZooKeeper create request is forwarded, then the
    /// connection is closed both ways before its reply can come back.
    pub fn cut_after_next_create(&self) {
        self.state.cut_after_create.store(true, Ordering::SeqCst);
    }

    /// How many connections were cut by [`cut_after_next_create`](Self::cut_after_next_create).
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Ok(streams) = self.state.streams.lock() {
            for s in streams.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

impl State {
    /// Whether bytes read now may be forwarded: false while black-holed (they are dropped);
    /// otherwise returns once any stall is over and the added latency has passed.
    fn pass(&self, read_at: Instant) -> bool {
        while self.stalled.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let delay = Duration::from_micros(self.delay_us.load(Ordering::SeqCst));
        if let Some(wait) = (read_at + delay).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        !self.blackhole.load(Ordering::SeqCst)
    }
}

/// Bytes as they come, unless black-holed, stalled or delayed.
fn pump(mut from: TcpStream, mut to: TcpStream, state: &State) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !state.pass(Instant::now()) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Client to server, frame by frame (ZooKeeper frames: 4-byte length, then the body; the
/// first frame of a connection is the handshake, later ones start with xid and type).
fn upstream(mut client: TcpStream, mut server: TcpStream, state: Arc<State>) {
    let mut first = true;
    loop {
        let mut len = [0u8; 4];
        if client.read_exact(&mut len).is_err() {
            break;
        }
        let n = i32::from_be_bytes(len).max(0) as usize;
        let mut body = vec![0u8; n];
        if client.read_exact(&mut body).is_err() {
            break;
        }
        if !state.pass(Instant::now()) {
            continue;
        }
        if server.write_all(&len).is_err() || server.write_all(&body).is_err() {
            break;
        }
        let kind =
            (!first && n >= 8).then(|| i32::from_be_bytes([body[4], body[5], body[6], body[7]]));
        first = false;
        if kind.is_some_and(|k| ZK_CREATES.contains(&k))
            && state.cut_after_create.swap(false, Ordering::SeqCst)
        {
            // Let the server take the request, then drop the connection before the reply.
            std::thread::sleep(Duration::from_millis(100));
            state.cuts.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}
