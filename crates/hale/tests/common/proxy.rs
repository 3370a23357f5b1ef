//! A loopback HTTP proxy for the tests of hale behind `HTTP_PROXY` /
//! `HTTPS_PROXY`: `CONNECT host:port` is tunnelled (https), a request in
//! absolute form (`POST http://host:port/path`) is passed on to its host
//! as it came (plain http). It records each connection's first request
//! line, so a test can tell which requests went through it.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Each proxied connection's first request line, in arrival order.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().expect("seen").clone()
    }
}

/// Starts the proxy on a free loopback port: its URL and what it sees.
pub async fn start() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Seen::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(relay(client, log.clone()));
        }
    });
    (url, seen)
}

async fn relay(mut client: TcpStream, seen: Seen) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let line = head.lines().next().unwrap_or_default().to_owned();
    seen.0.lock().expect("seen").push(line.clone());
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let authority = if method == "CONNECT" {
        target.to_owned()
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(target);
        rest.split('/').next().unwrap_or(rest).to_owned()
    };
    let Ok(mut upstream) = TcpStream::connect(&authority).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    if method == "CONNECT" {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        buf.drain(..end);
    }
    // An HTTP/1.1 server takes the absolute form as it came.
    if upstream.write_all(&buf).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
