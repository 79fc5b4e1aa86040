//! dlock's own connection to one Redis server, for its scripts: `redis://`, `rediss://` and
//! each Redlock node. A command is written as RESP2 straight from the engine's keys and
//! arguments, a reply is read straight into the engine's [`Value`], and one task per
//! connection keeps the socket: it writes every request waiting, in order, and hands the
//! replies back in the same order (pipelining, as Redis answers a connection's commands).
//!
//! It stands where the redis crate's `ConnectionManager` stood, and behaves as it did: the
//! first connection must come up and take the credentials (AUTH, SELECT, PING) or the client
//! does not start; a lost connection fails the commands under way (their outcome is unknown:
//! the engine treats them so) and is made again at once, then with backoff from 50 ms to 2 s,
//! while new commands wait for it (the engine times them out itself). What it saves is the
//! redis crate's general machinery on every command — building a `Cmd`, its pipeline's
//! queue, its parser-combinator codec, its `Value` and the copy into the engine's — a fifth
//! of an uncontended Rust cycle's instructions, 65,096 → 51,673 (bench/README.md, "A
//! connection of dlock's own"). A Redis Cluster's scripts (slot routing, MOVED and ASK) and
//! its sharded pub/sub stay on the redis crate.
//!
//! A [`Listener`] is the pub/sub connection beside it (one Redis, or any node of a cluster):
//! its task reads each wake-up straight into the notice the engine gets, where the redis
//! crate's `PubSub` passed it through a task and a channel of its own first.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::redis::{ConnectionAddr, IntoConnectionInfo};
use dlock_core::redis::{Value, Words};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::redact;

/// How long a connection, its TLS handshake and its AUTH, SELECT and PING may take.
const OPEN_WITHIN: Duration = Duration::from_secs(5);
/// The first and the longest wait between two tries to connect again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));
/// How deep a reply's arrays may nest (the protocol's replies nest one level).
const MAX_DEPTH: usize = 8;
/// The most a connection gathers into one write, and the most of its read and write buffers
/// it keeps once a burst is over: a burst (a round of renewals of 100,000 locks is 1,000
/// requests of 100 keys) goes out in writes of this size, and a reply larger than this is
/// read into a buffer that then shrinks back.
const BUFFER: usize = 64 * 1024;

/// A command that got no result: the server's error reply, or no reply at all.
#[derive(Debug)]
pub(super) enum Failure {
    /// The server's error line (`NOSCRIPT No matching script.`): its first word is the code.
    Server(String),
    /// No reply: the connection was lost with the command under way, or the reply could not
    /// be read. Whether the server ran the command is unknown.
    Unavailable(String),
}

impl Failure {
    /// The error's code (`ERR`, `NOSCRIPT`, `NOPERM` …), for a server error.
    pub(super) fn code(&self) -> Option<&str> {
        match self {
            Failure::Server(line) => line.split(' ').next(),
            Failure::Unavailable(_) => None,
        }
    }

    /// What follows the code, for a server error.
    pub(super) fn detail(&self) -> Option<&str> {
        match self {
            Failure::Server(line) => line.split_once(' ').map(|(_, detail)| detail),
            Failure::Unavailable(_) => None,
        }
    }
}

/// Where a link connects and how it introduces itself, from a `redis://` or `rediss://` URL
/// as the redis crate reads it (so both accept the same URLs, percent-decoding included).
pub(super) struct Target {
    host: String,
    port: u16,
    tls: bool,
    /// AUTH (with the URL's user and password) and SELECT as the URL asks, then PING:
    /// written first on every connection, their replies read before any request is sent.
    hello: Vec<u8>,
    greetings: usize,
}

impl fmt::Display for Target {
    /// `host:port`: never the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Target {
    /// Reads `url`; `Err` says what is wrong with it (without its password).
    pub(super) fn new(url: &str) -> Result<Self, String> {
        let info = url
            .into_connection_info()
            .map_err(|e| redact(&e.to_string()))?;
        let (host, port, tls) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host.clone(), *port, false),
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(
                    "#insecure: dlock verifies every server's certificate (give the CA in SSL_CERT_FILE)"
                        .into(),
                );
            }
            ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port, true),
            other => return Err(format!("{other:?}: only TCP is supported")),
        };
        let settings = info.redis_settings();
        let (mut hello, mut greetings) = (Vec::new(), 1);
        if let Some(password) = settings.password() {
            let password = password.as_bytes();
            match settings.username() {
                Some(user) => write_command(&mut hello, &[b"AUTH", user.as_bytes(), password], &[]),
                None => write_command(&mut hello, &[b"AUTH", password], &[]),
            }
            greetings += 1;
        }
        if settings.db() != 0 {
            let db = settings.db().to_string();
            write_command(&mut hello, &[b"SELECT", db.as_bytes()], &[]);
            greetings += 1;
        }
        write_command(&mut hello, &[b"PING"], &[]);
        Ok(Self {
            host,
            port,
            tls,
            hello,
            greetings,
        })
    }

    /// What a TLS target's connections are made with (`None` for plain TCP).
    fn connector(&self) -> Result<Option<tokio_rustls::TlsConnector>, String> {
        Ok(match self.tls {
            false => None,
            true => Some(tokio_rustls::TlsConnector::from(Arc::new(
                super::ssl::client_config(None)?,
            ))),
        })
    }

    /// A new connection, introduced (AUTH, SELECT, PING answered), within [`OPEN_WITHIN`].
    async fn open(&self, tls: Option<&tokio_rustls::TlsConnector>) -> Result<Box<dyn Io>, String> {
        let open = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| e.to_string())?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut io: Box<dyn Io> = match tls {
                None => Box::new(tcp),
                Some(connector) => {
                    let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                        .map_err(|e| format!("{:?}: {e}", self.host))?;
                    Box::new(
                        connector
                            .connect(name, tcp)
                            .await
                            .map_err(|e| e.to_string())?,
                    )
                }
            };
            io.write_all(&self.hello).await.map_err(|e| e.to_string())?;
            io.flush().await.map_err(|e| e.to_string())?;
            let mut buf = Vec::with_capacity(256);
            let mut greetings = self.greetings;
            while greetings > 0 {
                if io.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                    return Err("the server closed the connection".into());
                }
                while greetings > 0 {
                    let Some((reply, used)) = parse(&buf, 0)? else {
                        break;
                    };
                    if let Err(Failure::Server(line)) = reply {
                        return Err(line);
                    }
                    buf.drain(..used);
                    greetings -= 1;
                }
            }
            Ok(io)
        };
        tokio::time::timeout(OPEN_WITHIN, open)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", OPEN_WITHIN.as_secs())))
    }
}

/// A connection's byte stream: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A command's result.
type Reply = Result<Value, Failure>;
/// Where a request's outcome goes: its reply (`T`: the value), or why it got none.
type Outcome<T> = oneshot::Sender<Result<T, Failure>>;
/// Where a command's result goes.
type Answer = Outcome<Value>;
type Request = (Vec<u8>, Answer);

/// A handle on one server's connection; clones share it. The connection's task ends once
/// every handle is gone.
#[derive(Clone)]
pub(super) struct Link {
    requests: mpsc::UnboundedSender<Request>,
}

impl Link {
    /// Connects to `target` and keeps the connection up from then on. `Err` if the first
    /// connection does not come up, is refused its credentials, or (TLS) the server's
    /// certificate does not verify.
    pub(super) async fn connect(target: Arc<Target>) -> Result<Self, String> {
        let tls = target.connector()?;
        let io = target.open(tls.as_ref()).await?;
        let (requests, queue) = mpsc::unbounded_channel();
        tokio::spawn(keep(target, tls, io, queue));
        Ok(Self { requests })
    }

    /// Sends one command (RESP, from [`command`]) and waits for its reply.
    pub(super) async fn query(&self, command: Vec<u8>) -> Result<Value, Failure> {
        let closed = || Failure::Unavailable("the connection is closed".into());
        let (reply, answer) = oneshot::channel();
        self.requests.send((command, reply)).map_err(|_| closed())?;
        answer.await.unwrap_or_else(|_| Err(closed()))
    }
}

/// The connection's task: serves requests on `io` until it is lost, then connects again
/// (requests wait in the queue meanwhile), until every [`Link`] is gone.
async fn keep(
    target: Arc<Target>,
    tls: Option<tokio_rustls::TlsConnector>,
    mut io: Box<dyn Io>,
    mut queue: mpsc::UnboundedReceiver<Request>,
) {
    loop {
        let Err(why) = serve(&mut *io, &mut queue).await else {
            return;
        };
        tracing::warn!(server = %target, "Redis connection lost ({why}); reconnecting");
        // At once (a connection the server dropped comes back in a round trip), then with
        // backoff while the server does not answer.
        let mut backoff = BACKOFF.0;
        io = loop {
            match target.open(tls.as_ref()).await {
                Ok(io) => break io,
                Err(e) => tracing::debug!(server = %target, "reconnecting: {e}"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF.1);
            if queue.is_closed() {
                return;
            }
        };
        tracing::info!(server = %target, "Redis connection restored");
    }
}

/// Writes the queue's requests to `io` and hands each reply to its request, in order.
/// `Ok` once every [`Link`] is gone; `Err` when the connection is lost (every request under
/// way is failed first).
async fn serve(
    io: &mut dyn Io,
    queue: &mut mpsc::UnboundedReceiver<Request>,
) -> Result<(), String> {
    pump(io, queue, "command", |input, under_way| {
        answer(input, under_way)
            .map(Some)
            .map_err(|e| format!("a malformed reply: {e}"))
    })
    .await
}

/// A connection's loop: writes what `queue` brings (its answers wait in `under_way`, in
/// order) and hands what the server sends to `take`, which says how many bytes of whole
/// replies it used, `None` to stop (then `Ok`), or why the connection cannot go on. `Ok`
/// once every handle on the queue is gone; `Err` when the connection is lost, every
/// request under way (`what`: their kind) failed first.
async fn pump<T>(
    io: &mut dyn Io,
    queue: &mut mpsc::UnboundedReceiver<(Vec<u8>, Outcome<T>)>,
    what: &str,
    mut take: impl FnMut(&[u8], &mut VecDeque<Outcome<T>>) -> Result<Option<usize>, String>,
) -> Result<(), String> {
    let mut under_way = VecDeque::new();
    let (mut out, mut input) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
    let lost = loop {
        tokio::select! {
            biased;
            read = io.read_buf(&mut input) => {
                match read {
                    Ok(0) => break "the server closed the connection".to_owned(),
                    Ok(_) => {}
                    Err(e) => break e.to_string(),
                }
                match take(&input, &mut under_way) {
                    Ok(Some(used)) => consumed(&mut input, used),
                    Ok(None) => return Ok(()),
                    Err(e) => break e,
                }
            }
            request = queue.recv() => {
                let Some(first) = request else { return Ok(()) };
                if let Err(e) = write_waiting(io, &mut out, first, queue, &mut under_way).await {
                    break e.to_string();
                }
            }
        }
    };
    fail_under_way(under_way, what, &lost);
    Err(lost)
}

/// Writes `first` and every other request waiting in `queue` to `io`, in writes of about
/// [`BUFFER`] bytes (one, unless it is a burst), their answers queued in `under_way` in the
/// same order. `out` is empty between calls, and keeps no more than [`BUFFER`].
async fn write_waiting<A>(
    io: &mut dyn Io,
    out: &mut Vec<u8>,
    first: (Vec<u8>, A),
    queue: &mut mpsc::UnboundedReceiver<(Vec<u8>, A)>,
    under_way: &mut VecDeque<A>,
) -> std::io::Result<()> {
    let mut next = Some(first);
    while let Some((command, answer)) = next {
        out.extend_from_slice(&command);
        under_way.push_back(answer);
        next = queue.try_recv().ok();
        if next.is_none() || out.len() >= BUFFER {
            io.write_all(out).await?;
            out.clear();
        }
    }
    // A command longer than BUFFER (FUNCTION LOAD of the library) grew it.
    out.shrink_to(BUFFER);
    // TLS may keep what the socket did not take at once until a flush (plain TCP's flush
    // does nothing).
    io.flush().await
}

/// Drops the `used` bytes of whole replies from the front of `input`; a buffer a burst of
/// replies grew shrinks back to [`BUFFER`].
fn consumed(input: &mut Vec<u8>, used: usize) {
    input.drain(..used);
    input.shrink_to(BUFFER);
}

/// Fails every request under way on a connection that was lost (`what`: the kind of
/// request): whether the server ran it is unknown.
fn fail_under_way<T>(under_way: VecDeque<Outcome<T>>, what: &str, lost: &str) {
    for request in under_way {
        let _ = request.send(Err(Failure::Unavailable(format!(
            "connection lost with the {what} under way: {lost}"
        ))));
    }
}

/// Hands each whole reply in `input` to the request it answers, in order; the bytes they took.
fn answer(input: &[u8], under_way: &mut VecDeque<Answer>) -> Result<usize, String> {
    let mut at = 0;
    while let Some((reply, next)) = parse(input, at)? {
        at = next;
        let request = under_way.pop_front().ok_or("a reply to no command")?;
        let _ = request.send(reply);
    }
    Ok(at)
}

/// What a [`Listener`] hears.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// A message published to a channel subscribed to.
    Message { channel: Vec<u8>, payload: Vec<u8> },
    /// The connection was lost: its subscriptions with it.
    Lost,
    /// A connection was made again, with no subscription.
    Restored,
}

/// A SUBSCRIBE (RESP) and where its confirmation goes.
type Subscribe = (Vec<u8>, Outcome<()>);

/// A pub/sub connection: SUBSCRIBEs on request and tells each message, in order, to the
/// function it was made with. Lost, it says so, connects again (to the next target of its
/// list: any node of a cluster hears every PUBLISH), at once and then with backoff, and says
/// when it is back; the subscriptions are then the caller's to make again. Its task ends with
/// [`Listener::close`], or once the function returns `false`.
pub(super) struct Listener {
    requests: mpsc::UnboundedSender<Subscribe>,
    task: tokio::task::AbortHandle,
}

impl Listener {
    /// Connects to the first of `targets` that answers (`Err`: the last one's error).
    pub(super) async fn connect(
        targets: Vec<Arc<Target>>,
        hear: impl FnMut(Heard) -> bool + Send + 'static,
    ) -> Result<Self, String> {
        let tls = targets
            .iter()
            .map(|t| t.connector())
            .collect::<Result<Vec<_>, _>>()?;
        let mut error = String::from("no server");
        for (at, target) in targets.iter().enumerate() {
            match target.open(tls[at].as_ref()).await {
                Ok(io) => {
                    let (requests, queue) = mpsc::unbounded_channel();
                    let task = tokio::spawn(listen(targets, tls, (at, io), queue, hear));
                    return Ok(Self {
                        requests,
                        task: task.abort_handle(),
                    });
                }
                Err(e) => error = format!("{target}: {e}"),
            }
        }
        Err(error)
    }

    /// Subscribes to `channel`: `Ok` once the server confirms. Sent at once, so
    /// subscriptions are made in the order of these calls.
    pub(super) fn subscribe(
        &self,
        channel: Vec<u8>,
    ) -> impl std::future::Future<Output = Result<(), Failure>> + Send + 'static {
        let (done, confirmed) = oneshot::channel();
        let sent = self
            .requests
            .send((command(&[b"SUBSCRIBE", &channel], &[]), done));
        async move {
            let closed = || Failure::Unavailable("the pub/sub connection is closed".into());
            sent.map_err(|_| closed())?;
            confirmed.await.unwrap_or_else(|_| Err(closed()))
        }
    }

    /// Ends the connection's task.
    pub(super) fn close(&self) {
        self.task.abort();
    }
}

/// A [`Listener`]'s task: relays on `io` until it is lost, then connects again.
async fn listen(
    targets: Vec<Arc<Target>>,
    tls: Vec<Option<tokio_rustls::TlsConnector>>,
    first: (usize, Box<dyn Io>),
    mut queue: mpsc::UnboundedReceiver<Subscribe>,
    mut hear: impl FnMut(Heard) -> bool,
) {
    let (mut at, io) = first;
    let mut io = Some(io);
    let mut backoff = BACKOFF.0;
    loop {
        let mut conn = match io.take() {
            Some(io) => io,
            None => match targets[at].open(tls[at].as_ref()).await {
                Ok(io) => {
                    backoff = BACKOFF.0;
                    tracing::info!(server = %targets[at], "Redis pub/sub connection restored");
                    if !hear(Heard::Restored) {
                        return;
                    }
                    io
                }
                Err(e) => {
                    tracing::debug!(server = %targets[at], "reconnecting pub/sub: {e}");
                    // Subscriptions fail while it is down: the engine tries again.
                    while let Ok((_, done)) = queue.try_recv() {
                        let _ = done.send(Err(Failure::Unavailable(format!(
                            "the pub/sub connection is down: {e}"
                        ))));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF.1);
                    at = (at + 1) % targets.len();
                    if queue.is_closed() {
                        return;
                    }
                    continue;
                }
            },
        };
        let why = match relay(&mut *conn, &mut queue, &mut hear).await {
            Ok(()) => return,
            Err(why) => why,
        };
        tracing::warn!(server = %targets[at], "Redis pub/sub connection lost ({why}); reconnecting");
        at = (at + 1) % targets.len();
        if !hear(Heard::Lost) {
            return;
        }
    }
}

/// Writes the queue's SUBSCRIBEs to `io` and reads what the server sends: confirmations,
/// in order, to the subscriptions waiting for them; messages to `hear`. `Ok` once every
/// [`Listener`] is gone or `hear` wants no more; `Err` when the connection is lost (the
/// subscriptions under way fail first).
async fn relay(
    io: &mut dyn Io,
    queue: &mut mpsc::UnboundedReceiver<Subscribe>,
    hear: &mut impl FnMut(Heard) -> bool,
) -> Result<(), String> {
    pump(io, queue, "SUBSCRIBE", |input, under_way| {
        let mut at = 0;
        while let Some((reply, next)) =
            parse(input, at).map_err(|e| format!("a malformed reply: {e}"))?
        {
            at = next;
            match pushed(reply) {
                Pushed::Message(message) => {
                    if !hear(message) {
                        return Ok(None);
                    }
                }
                Pushed::Confirmation(result) => {
                    let done = under_way
                        .pop_front()
                        .ok_or("a confirmation of no SUBSCRIBE")?;
                    let _ = done.send(result);
                }
                Pushed::Other => {}
            }
        }
        Ok(Some(at))
    })
    .await
}

/// What a subscribed connection was sent.
enum Pushed {
    Message(Heard),
    /// A SUBSCRIBE's answer: its confirmation, or the server's error (NOPERM, say).
    Confirmation(Result<(), Failure>),
    /// Anything else (another kind of push): nothing to do.
    Other,
}

fn pushed(reply: Reply) -> Pushed {
    let items = match reply {
        Ok(Value::Array(items)) => items,
        Err(e) => return Pushed::Confirmation(Err(e)),
        Ok(_) => return Pushed::Other,
    };
    let mut items = items.into_iter();
    match (items.next(), items.next(), items.next(), items.next()) {
        (Some(Value::Data(kind)), Some(Value::Data(channel)), Some(Value::Data(payload)), None)
            if kind == b"message" =>
        {
            Pushed::Message(Heard::Message { channel, payload })
        }
        (Some(Value::Data(kind)), Some(_), Some(Value::Int(_)), None) if kind == b"subscribe" => {
            Pushed::Confirmation(Ok(()))
        }
        _ => Pushed::Other,
    }
}

/// One command in RESP: `head` (the verb and its first arguments), then `tail`.
pub(super) fn command(head: &[&[u8]], tail: &[&Words]) -> Vec<u8> {
    // Each part is framed by `$<length>\r\n` and `\r\n`: 8 bytes for a short one.
    let parts = head.len() + tail.iter().map(|t| t.len()).sum::<usize>();
    let size = head.iter().map(|p| p.len()).sum::<usize>()
        + tail.iter().map(|t| t.byte_len()).sum::<usize>();
    let mut out = Vec::with_capacity(16 + 8 * parts + size);
    write_command(&mut out, head, tail);
    out
}

/// Appends one command to `out` in RESP: `head` (the verb and its first arguments), then
/// `tail`.
fn write_command(out: &mut Vec<u8>, head: &[&[u8]], tail: &[&Words]) {
    let parts = head.len() + tail.iter().map(|t| t.len()).sum::<usize>();
    let mut number = itoa::Buffer::new();
    out.push(b'*');
    out.extend_from_slice(number.format(parts).as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut bulk = |part: &[u8]| {
        out.push(b'$');
        out.extend_from_slice(number.format(part.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    };
    for part in head {
        bulk(part);
    }
    for part in tail.iter().copied().flatten() {
        bulk(part.as_bytes());
    }
}

/// The reply that starts at `buf[at..]` and where it ends; `Ok(None)` while `buf` does not
/// hold all of it yet; `Err` when it is not RESP2.
fn parse(buf: &[u8], at: usize) -> Result<Option<(Reply, usize)>, String> {
    parse_in(buf, at, 0)
}

fn parse_in(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    let Some(end) = line_end(buf, at) else {
        return Ok(None);
    };
    let (kind, line, next) = (buf[at], &buf[at + 1..end], end + 2);
    let text = || String::from_utf8_lossy(line).into_owned();
    let number = || integer(line).ok_or_else(|| format!("not a number: {:?}", text()));
    Ok(Some(match kind {
        b'+' => (Ok(Value::Status(text())), next),
        b'-' => (Err(Failure::Server(text())), next),
        b':' => (Ok(Value::Int(number()?)), next),
        b'$' => match number()? {
            -1 => (Ok(Value::Nil), next),
            len if len >= 0 => {
                let stop = next + len as usize;
                if buf.len() < stop + 2 {
                    return Ok(None);
                }
                if &buf[stop..stop + 2] != b"\r\n" {
                    return Err("a bulk string without its CRLF".into());
                }
                (Ok(Value::Data(buf[next..stop].to_vec())), stop + 2)
            }
            len => return Err(format!("a bulk string of length {len}")),
        },
        b'*' => match number()? {
            -1 => (Ok(Value::Nil), next),
            count if count >= 0 => {
                if depth >= MAX_DEPTH {
                    return Err(format!("arrays nested deeper than {MAX_DEPTH}"));
                }
                // Each item takes 3 bytes at least: no capacity beyond what `buf` can hold.
                let mut items = Vec::with_capacity((count as usize).min(buf.len() / 3));
                let mut at = next;
                for _ in 0..count {
                    let Some((item, after)) = parse_in(buf, at, depth + 1)? else {
                        return Ok(None);
                    };
                    // An error inside an array (never one of the protocol's replies) is kept
                    // as its text, for the engine to reject as malformed.
                    items.push(item.unwrap_or_else(|e| match e {
                        Failure::Server(line) | Failure::Unavailable(line) => Value::Status(line),
                    }));
                    at = after;
                }
                (Ok(Value::Array(items)), at)
            }
            count => return Err(format!("an array of length {count}")),
        },
        other => return Err(format!("a reply of unknown kind {:?}", other as char)),
    }))
}

/// Where the line that starts at `buf[at..]` ends: the index of its `\r\n`, once `buf` has it.
fn line_end(buf: &[u8], at: usize) -> Option<usize> {
    let mut from = at;
    loop {
        let cr = from + buf.get(from..)?.iter().position(|&b| b == b'\r')?;
        match buf.get(cr + 1) {
            Some(b'\n') => return Some(cr),
            Some(_) => from = cr + 1,
            None => return None,
        }
    }
}

/// The integer a reply's line spells (`-` and decimal digits, as `i64` parses it, read
/// straight from the bytes); `None` if it spells none or one out of range.
fn integer(line: &[u8]) -> Option<i64> {
    let (negative, digits) = match line {
        [b'-', digits @ ..] => (true, digits),
        [b'+', digits @ ..] => (false, digits),
        digits => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        // Toward the sign, so that i64::MIN is read too.
        n = n.checked_mul(10).and_then(|n| {
            if negative {
                n.checked_sub(d)
            } else {
                n.checked_add(d)
            }
        })?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        parse(bytes, 0)
    }

    /// A burst goes out whole and in order, in writes of about BUFFER bytes, and neither
    /// buffer keeps more than BUFFER once it is over (they once kept the largest burst: 15 MB
    /// for a client renewing 100,000 locks).
    #[tokio::test]
    async fn a_burst_is_written_in_bounded_writes_and_no_buffer_keeps_its_size() {
        let (mut near, mut far) = tokio::io::duplex(4 * BUFFER);
        let (requests, mut queue) = mpsc::unbounded_channel();
        let commands: Vec<Vec<u8>> = (0..2_000u32)
            .map(|i| command(&[b"PING", format!("{i:0>300}").as_bytes()], &[]))
            .collect();
        for (i, c) in commands.iter().enumerate() {
            requests.send((c.clone(), i)).expect("the queue is open");
        }
        let first = queue.try_recv().expect("queued");
        let (mut out, mut under_way) = (Vec::new(), VecDeque::new());
        let expected: Vec<u8> = commands.concat();
        assert!(
            expected.len() > 8 * BUFFER,
            "a burst of {} bytes",
            expected.len()
        );
        let mut written = vec![0; expected.len()];
        let (wrote, read) = tokio::join!(
            write_waiting(&mut near, &mut out, first, &mut queue, &mut under_way),
            far.read_exact(&mut written),
        );
        wrote.expect("written");
        read.expect("read");
        assert!(written == expected, "the commands, whole and in order");
        assert_eq!(under_way, (0..2_000).collect::<VecDeque<_>>());
        assert!(
            out.is_empty() && out.capacity() <= BUFFER,
            "{}",
            out.capacity()
        );

        // A reply longer than BUFFER grows the read buffer; once read, it shrinks back.
        let mut input = vec![b'x'; 4 * BUFFER];
        consumed(&mut input, 4 * BUFFER - 10);
        assert_eq!((input.len(), input.capacity() <= BUFFER), (10, true));
    }

    #[test]
    fn commands_are_written_as_resp_arrays_of_bulk_strings() {
        let (keys, args) = (Words::from(["k1"]), Words::from([""]));
        let out = command(&[b"FCALL", b"f", b"1"], &[&keys, &args]);
        assert_eq!(
            out,
            b"*5\r\n$5\r\nFCALL\r\n$1\r\nf\r\n$1\r\n1\r\n$2\r\nk1\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn a_subscribed_connection_tells_messages_and_confirmations_apart() {
        let heard = |bytes: &[u8]| match pushed(one(bytes).unwrap().unwrap().0) {
            Pushed::Message(heard) => Some(Ok(heard)),
            Pushed::Confirmation(result) => Some(Err(result.map_err(|e| format!("{e:?}")))),
            Pushed::Other => None,
        };
        assert_eq!(
            heard(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\na b\r\n"),
            Some(Ok(Heard::Message {
                channel: b"ch".to_vec(),
                payload: b"a b".to_vec()
            }))
        );
        assert_eq!(
            heard(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"),
            Some(Err(Ok(())))
        );
        // A SUBSCRIBE refused (an ACL without the channel) answers it, as an error.
        assert_eq!(
            heard(b"-NOPERM no permissions to access the 'ch' channel\r\n"),
            Some(Err(Err(
                "Server(\"NOPERM no permissions to access the 'ch' channel\")".into()
            )))
        );
        // Other pushes, and messages not of the expected shape, are nobody's.
        for other in [
            &b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n"[..],
            b"*2\r\n$4\r\npong\r\n$0\r\n\r\n",
            b"*2\r\n$7\r\nmessage\r\n$2\r\nch\r\n",
            b"*3\r\n$7\r\nmessage\r\n:1\r\n$1\r\nx\r\n",
            b"+OK\r\n",
        ] {
            assert_eq!(heard(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn every_reply_kind_is_read_and_partial_replies_wait() {
        let reply = b"*4\r\n:1\r\n$3\r\nab\n\r\n$-1\r\n+OK\r\n";
        let Some((Ok(value), used)) = one(reply).unwrap() else {
            panic!("a whole reply")
        };
        assert_eq!(used, reply.len());
        assert_eq!(
            value,
            Value::Array(vec![
                Value::Int(1),
                Value::Data(b"ab\n".to_vec()),
                Value::Nil,
                Value::Status("OK".into())
            ])
        );
        // Every prefix is incomplete, never an error.
        for n in 0..reply.len() {
            assert!(one(&reply[..n]).unwrap().is_none(), "{n}");
        }
        let Some((Err(e), _)) = one(b"-NOSCRIPT No matching script.\r\n").unwrap() else {
            panic!("an error reply")
        };
        assert_eq!(
            (e.code(), e.detail()),
            (Some("NOSCRIPT"), Some("No matching script."))
        );
        // Two replies in one read: the second starts where the first ended.
        let two = b":7\r\n*-1\r\n";
        let (_, at) = one(two).unwrap().unwrap();
        let (second, end) = parse(two, at).unwrap().unwrap();
        assert_eq!((second.unwrap(), end), (Value::Nil, two.len()));
    }

    #[test]
    fn integers_are_read_as_i64_parses_them_and_a_lone_cr_stays_in_its_line() {
        for line in [
            "0",
            "7",
            "-1",
            "+5",
            "1764000000000000",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "",
            "-",
            "+",
            "--1",
            "1 ",
            "１",
            "99999999999999999999999",
        ] {
            assert_eq!(
                integer(line.as_bytes()),
                line.parse::<i64>().ok(),
                "{line:?}"
            );
        }
        let Some((Ok(Value::Status(status)), used)) = one(b"+a\rb\r\n:1\r\n").unwrap() else {
            panic!("a status line")
        };
        assert_eq!((status.as_str(), used), ("a\rb", 6));
        assert!(one(b"+a\r").unwrap().is_none());
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$-5\r\n",
            b"$2\r\nabcd\r\n",
            b"*-2\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(one(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn urls_are_read_as_the_redis_crate_reads_them_and_never_shown_with_a_password() {
        let target = Target::new("redis://al%40ice:p%3Ass@127.0.0.1:6390/3").unwrap();
        assert_eq!(target.to_string(), "127.0.0.1:6390");
        let mut hello = Vec::new();
        write_command(&mut hello, &[b"AUTH", b"al@ice", b"p:ss"], &[]);
        write_command(&mut hello, &[b"SELECT", b"3"], &[]);
        write_command(&mut hello, &[b"PING"], &[]);
        assert_eq!((target.hello, target.greetings), (hello, 3));
        let insecure = Target::new("rediss://127.0.0.1:6390/#insecure")
            .err()
            .unwrap();
        assert!(insecure.contains("verifies"), "{insecure}");
        let bad = Target::new("redis://:s3cret@host:notaport").err().unwrap();
        assert!(!bad.contains("s3cret"), "{bad}");
    }
}
