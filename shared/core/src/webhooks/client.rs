//! One webhook POST over a connection to the address the SSRF guard checked.
//!
//! Invariants:
//! - The TCP connection goes to [`Target::addr`]; the host name is used only for TLS (SNI and the
//!   certificate check) and the `Host` header — there is no second DNS lookup.
//! - Redirects are never followed (a 3xx is an answer like any other: a failure).
//! - Connect and total timeouts bound every attempt; at most [`EXCERPT_BYTES`] of the answer are
//!   read, and only a scanned excerpt of them is ever kept ([`scan_excerpt`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

use super::guard::Target;

/// How much of an answer is read at most.
pub const EXCERPT_BYTES: usize = 512;
const EXCERPT_CHARS: usize = 120;

/// Connect and total bounds of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { connect: Duration::from_secs(5), total: Duration::from_secs(15) }
    }
}

/// What the receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `Retry-After` in seconds, when given as seconds or an HTTP date in the future.
    pub retry_after: Option<Duration>,
    pub excerpt: Option<String>,
}

/// Why no answer came. `code` is stable and goes into the attempt row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("connection timed out")]
    ConnectTimeout,
    #[error("connection failed")]
    Connect,
    #[error("TLS handshake failed")]
    Tls,
    #[error("no answer within the total timeout")]
    Timeout,
    #[error("the HTTP exchange failed")]
    Http,
}

impl PostError {
    pub const fn code(self) -> &'static str {
        match self {
            PostError::ConnectTimeout => "connect_timeout",
            PostError::Connect => "connect_failed",
            PostError::Tls => "tls_failed",
            PostError::Timeout => "timeout",
            PostError::Http => "http_error",
        }
    }
}

/// The headers of one signed delivery.
#[derive(Debug, Clone)]
pub struct Signed<'a> {
    pub id: &'a str,
    pub timestamp: i64,
    pub signature: &'a str,
    pub body: &'a [u8],
    /// `application/json`, or `application/fhir+json` for the FHIR format.
    pub content_type: &'a str,
}

/// Posts `signed` to `target` within `timeouts`.
pub async fn post(target: &Target, signed: &Signed<'_>, timeouts: Timeouts) -> Result<Answer, PostError> {
    let started = Instant::now();
    let tcp = tokio::time::timeout(timeouts.connect, tokio::net::TcpStream::connect(target.addr))
        .await
        .map_err(|_| PostError::ConnectTimeout)?
        .map_err(|_| PostError::Connect)?;
    let remaining = timeouts.total.saturating_sub(started.elapsed());
    let exchange = async {
        if target.url.https {
            let connector = native_tls::TlsConnector::new().map_err(|_| PostError::Tls)?;
            let tls = tokio_native_tls::TlsConnector::from(connector)
                .connect(&target.url.host, tcp)
                .await
                .map_err(|_| PostError::Tls)?;
            exchange(TokioIo::new(tls), target, signed).await
        } else {
            exchange(TokioIo::new(tcp), target, signed).await
        }
    };
    tokio::time::timeout(remaining, exchange).await.map_err(|_| PostError::Timeout)?
}

async fn exchange<IO>(io: IO, target: &Target, signed: &Signed<'_>) -> Result<Answer, PostError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(io).await.map_err(|_| PostError::Http)?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let default_port = if target.url.https { 443 } else { 80 };
    let host = match (target.url.host.contains(':'), target.url.port == default_port) {
        (true, true) => format!("[{}]", target.url.host),
        (true, false) => format!("[{}]:{}", target.url.host, target.url.port),
        (false, true) => target.url.host.clone(),
        (false, false) => format!("{}:{}", target.url.host, target.url.port),
    };
    let request = http::Request::post(target.url.path.as_str())
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, signed.content_type)
        .header(http::header::USER_AGENT, "clinic-webhooks/1")
        .header("webhook-id", signed.id)
        .header("webhook-timestamp", signed.timestamp.to_string())
        .header("webhook-signature", signed.signature)
        .body(Full::new(Bytes::copy_from_slice(signed.body)))
        .map_err(|_| PostError::Http)?;
    let response = sender.send_request(request).await.map_err(|_| PostError::Http)?;
    let status = response.status().as_u16();
    let retry_after =
        response.headers().get(http::header::RETRY_AFTER).and_then(|v| retry_after(v.to_str().ok()?));
    // Read at most EXCERPT_BYTES; a longer body is cut (the connection is dropped with it).
    let mut limited = Limited::new(response.into_body(), EXCERPT_BYTES);
    let mut read = Vec::new();
    while let Some(Ok(frame)) = limited.frame().await {
        if let Ok(data) = frame.into_data() {
            read.extend_from_slice(&data);
        }
    }
    driver.abort();
    let excerpt = if (200..300).contains(&status) { None } else { scan_excerpt(&read) };
    Ok(Answer { status, retry_after, excerpt })
}

fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

/// The excerpt kept of a failed answer: printable ASCII only, at most 120 characters, and nothing at
/// all when it looks like it could carry contact data or a token (an `@`, a run of 7 digits, a long
/// unbroken word) — the receiver's body is not ours to store.
pub fn scan_excerpt(body: &[u8]) -> Option<String> {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { ' ' })
        .take(EXCERPT_CHARS)
        .collect();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return None;
    }
    let digits_run = text.as_bytes().windows(7).any(|w| w.iter().all(u8::is_ascii_digit));
    let long_word = text.split(' ').any(|word| word.len() > 32);
    if text.contains('@') || digits_run || long_word {
        return Some("[redacted]".into());
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_printable_and_scanned() {
        assert_eq!(scan_excerpt(b"  Service\r\n Unavailable "), Some("Service Unavailable".into()));
        assert_eq!(scan_excerpt(b""), None);
        assert_eq!(scan_excerpt(b"contact jane@example.com"), Some("[redacted]".into()));
        assert_eq!(scan_excerpt(b"call 5551234567"), Some("[redacted]".into()));
        assert_eq!(
            scan_excerpt(b"token eyJhbGciOiJIUzI1NiJ9eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
            Some("[redacted]".into())
        );
        assert!(
            scan_excerpt(&[b'x'; 400].map(|_| b'a').iter().flat_map(|c| [*c, b' ']).collect::<Vec<_>>())
                .unwrap()
                .len()
                <= 120
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(retry_after("soon"), None);
        let future = (chrono::Utc::now() + chrono::Duration::seconds(300)).to_rfc2822();
        assert!(retry_after(&future).unwrap() > Duration::from_secs(250));
    }
}
