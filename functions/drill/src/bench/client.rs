//! A minimal HTTP/1.1 keep-alive client on hyper: one connection per virtual client, requests sent one
//! after another on it (what a pooled client does under steady load), loopback only. Shared by
//! `clinic bench` and `clinic chaos`.

use std::net::SocketAddr;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A fresh signing secret for a bench's server child and the bearer header of one member signed
/// with it (an hour long): what every API run of the bench starts with.
pub struct BenchAuth {
    pub secret: String,
    pub header: HeaderValue,
}

impl BenchAuth {
    pub fn new(
        workspace: clinic_core::ids::WorkspaceId,
        member: clinic_core::ids::MemberId,
        role: clinic_http::auth::Role,
    ) -> anyhow::Result<Self> {
        let secret = format!("{}{}", ulid::Ulid::generate(), ulid::Ulid::generate());
        let token = clinic_http::auth::issue_token(
            secret.as_bytes(),
            workspace,
            member.ulid(),
            role,
            std::time::Duration::from_secs(3600),
        )?;
        Ok(Self { header: bearer(&token)?, secret })
    }
}

/// One open keep-alive connection.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
    authorization: HeaderValue,
}

impl Connection {
    /// Connects to `address` (must be loopback) and sends `authorization` with every request.
    pub async fn open(address: SocketAddr, authorization: HeaderValue) -> anyhow::Result<Self> {
        anyhow::ensure!(address.ip().is_loopback(), "bench load goes to loopback only, not {address}");
        let stream = TcpStream::connect(address).await.with_context(|| format!("connecting to {address}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self { sender, host: HeaderValue::from_str(&address.to_string())?, authorization })
    }

    /// POSTs a JSON body; answers the status and the whole response body.
    pub async fn post_json(&mut self, path: &str, body: String) -> anyhow::Result<(StatusCode, Bytes)> {
        let answer = self.post(path, body, None).await?;
        Ok((answer.status, answer.body))
    }

    /// POSTs a JSON body, with an `Idempotency-Key` when given; answers status, whether the answer is
    /// a problem document, and the whole body.
    pub async fn post(
        &mut self,
        path: &str,
        body: String,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        self.send(request.body(Full::new(Bytes::from(body)))?).await
    }

    /// GETs `path` (with its query); answers the status and the whole response body.
    pub async fn get(&mut self, path: &str) -> anyhow::Result<(StatusCode, Bytes)> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .body(Full::new(Bytes::new()))?;
        let answer = self.send(request).await?;
        Ok((answer.status, answer.body))
    }

    /// Sends one request on the kept-alive connection; answers status, problem flag and body.
    async fn send(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
        self.sender.ready().await.context("connection closed")?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let is_problem = response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer { status, is_problem, body })
    }
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub is_problem: bool,
    pub body: Bytes,
}

/// `Bearer <token>` as a header value.
pub fn bearer(token: &str) -> anyhow::Result<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))?;
    value.set_sensitive(true);
    Ok(value)
}
