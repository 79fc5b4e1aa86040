//! A process's lock statistics over HTTP, and `dlock stats`, which reads them.
//!
//! `dlock demo --serve ADDR` answers `GET /metrics` with the Prometheus text of every worker's
//! counts together (`dlock::prometheus::text`) — point a Prometheus at it — and `GET /stats`
//! with their JSON form (`dlock::json::stats_to_json`), which `dlock stats --from ADDR` prints.

use std::future::Future;
use std::time::Duration;

use dlock::{Client, Error, Stats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server of `dlock demo --serve` hands out: the counts of all these clients.
pub(crate) async fn gather(clients: &[Client]) -> Result<Stats, Error> {
    let mut all = Stats::default();
    for client in clients {
        all.merge(&client.stats().await?);
    }
    Ok(all)
}

/// Serves `GET /metrics` and `GET /stats` on `listener` with what `stats` gives at each
/// request, until dropped.
pub(crate) async fn serve<F, S>(listener: TcpListener, stats: S)
where
    S: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = Result<Stats, Error>> + Send,
{
    while let Ok((stream, _)) = listener.accept().await {
        let stats = stats.clone();
        tokio::spawn(async move {
            let _ = answer(stream, stats).await;
        });
    }
}

async fn answer<F, S>(mut stream: TcpStream, stats: S) -> std::io::Result<()>
where
    S: Fn() -> F,
    F: Future<Output = Result<Stats, Error>>,
{
    // The request line is all that matters; a request larger than this is not ours.
    let mut request = vec![0; 8192];
    let mut len = 0;
    while !request[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < request.len() {
        match stream.read(&mut request[len..]).await? {
            0 => break,
            n => len += n,
        }
    }
    let line = String::from_utf8_lossy(&request[..len]);
    let path = line.split(' ').nth(1).unwrap_or("");
    let (status, kind, body) = match (path, stats().await) {
        (_, Err(e)) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
        ("/metrics", Ok(s)) => (
            "200 OK",
            "text/plain; version=0.0.4",
            dlock::prometheus::text(&s),
        ),
        ("/stats", Ok(s)) => (
            "200 OK",
            "application/json",
            dlock::json::stats_to_json(&s).to_string(),
        ),
        _ => (
            "404 Not Found",
            "text/plain",
            "GET /metrics or /stats\n".to_owned(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// `dlock stats --from ADDR`: the JSON of `GET /stats` from a running `dlock demo --serve`,
/// printed as it came (`json`) or as a table.
pub(crate) async fn show(from: &str, json: bool) -> Result<u8, Error> {
    // The address as it may be printed: never a password typed into it.
    let shown = dlock::redact(from);
    let fetch = async {
        let mut stream = TcpStream::connect(from).await?;
        let request = format!("GET /stats HTTP/1.1\r\nHost: {from}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    let reply = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(|e| Error::Connect(format!("{shown}: {e}")))?;
    let body = match reply.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => body,
        _ => {
            let first = reply.lines().next().unwrap_or("no reply");
            eprintln!("dlock stats: {shown} answered {first:?}, not a dlock demo's stats");
            return Ok(crate::exit::UNAVAILABLE);
        }
    };
    if json {
        println!("{body}");
        return Ok(0);
    }
    let Ok(value) = body.parse::<serde_json::Value>() else {
        eprintln!("dlock stats: {shown} sent no JSON");
        return Ok(crate::exit::UNAVAILABLE);
    };
    println!(
        "{:<24} {:<9} {:>9} {:>9} {:>9} {:>5} {:>7} {:>12} {:>12} {:>5}",
        "lock",
        "kind",
        "acquired",
        "handed",
        "renewals",
        "held",
        "waiting",
        "wait mean",
        "wait max",
        "lost"
    );
    for s in value["locks"].as_array().into_iter().flatten() {
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        let wait = &s["wait"];
        let mean = wait["sum_seconds"].as_f64().unwrap_or(0.0)
            / wait["count"].as_f64().unwrap_or(0.0).max(1.0);
        let lost: u64 = s["lost"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        println!(
            "{:<24} {:<9} {:>9} {:>9} {:>9} {:>5} {:>7} {:>9.3} ms {:>9.3} ms {:>5}",
            s["name"].as_str().unwrap_or(""),
            s["kind"].as_str().unwrap_or(""),
            n("acquired"),
            n("handed_off"),
            n("renewals"),
            n("held"),
            n("waiting"),
            mean * 1e3,
            wait["max_seconds"].as_f64().unwrap_or(0.0) * 1e3,
            lost,
        );
    }
    Ok(0)
}
