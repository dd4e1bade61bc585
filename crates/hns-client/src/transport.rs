//! How a call reaches an hnsd: one HTTP exchange (method, path, JSON body -> status, body).
//! [`UnixSocket`] is hnsd's socket; hnsd's own crate has the in-process transport, which hands
//! the same request to the same API router without a socket.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use crate::client::ClientError;

/// hnsd's answer to one exchange: the HTTP status and the body.
pub type Reply = Result<(u16, Bytes), ClientError>;

/// One exchange in flight.
pub type Exchange<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// A way to reach one hnsd.
pub trait Transport: Send + Sync {
    /// Sends `method path` with `body` (JSON, or empty) and returns hnsd's answer.
    fn exchange(&self, method: Method, path: &str, body: Vec<u8>) -> Exchange<'_>;

    /// Where the calls go, for messages: a socket path, or the in-process hnsd's name.
    fn endpoint(&self) -> String;
}

/// hnsd's Unix socket, with idle HTTP/1 connections kept for reuse.
pub struct UnixSocket {
    socket: PathBuf,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl UnixSocket {
    pub fn new(socket: impl AsRef<Path>) -> UnixSocket {
        UnixSocket {
            socket: socket.as_ref().to_path_buf(),
            idle: Mutex::new(Vec::new()),
        }
    }

    fn connect_error(&self, reason: impl ToString) -> ClientError {
        ClientError::Connect {
            socket: self.socket.clone(),
            reason: reason.to_string(),
        }
    }

    async fn connection(&self) -> Result<SendRequest<Full<Bytes>>, ClientError> {
        loop {
            let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let Some(mut sender) = reused else { break };
            // A connection hnsd closed (e.g. it restarted) is dropped and the next one tried.
            if sender.ready().await.is_ok() {
                return Ok(sender);
            }
        }
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|e| self.connect_error(e))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.connect_error(e))?;
        tokio::spawn(async move {
            // The connection ends when hnsd or this client closes it; nothing to report.
            let _ = conn.await;
        });
        Ok(sender)
    }

    async fn send(&self, method: Method, path: &str, body: Vec<u8>) -> Reply {
        let mut sender = self.connection().await?;
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "hnsd")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| self.connect_error(e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?
            .to_bytes();
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sender);
        Ok((status, bytes))
    }
}

impl Transport for UnixSocket {
    fn exchange(&self, method: Method, path: &str, body: Vec<u8>) -> Exchange<'_> {
        let path = path.to_string();
        Box::pin(async move { self.send(method, &path, body).await })
    }

    fn endpoint(&self) -> String {
        self.socket.display().to_string()
    }
}
