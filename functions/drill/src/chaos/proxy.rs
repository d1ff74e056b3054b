//! The SQS fault: a TCP proxy in front of the emulator that the run can cut. The proxy, not the
//! emulator, is stopped: moto keeps queues in memory and would lose the messages it had accepted,
//! which real SQS never does, so an emulator restart would test the emulator, not the pipeline.
//!
//! The proxy's port stays bound for the whole run, cut or not. Closing the listener for the outage
//! and binding it again afterwards is not safe: while it is closed, the kernel may hand that port to
//! an outgoing connection of this machine as its local port (the port came from the ephemeral
//! range), and the bind then fails for as long as that connection lives — the outage would never
//! end. While cut, every connection is accepted and closed at once, and every open one is cut.

use std::net::SocketAddr;

use tokio::sync::watch;

/// Binds 127.0.0.1:0 for a proxy to `target`; answers the port and the task that runs the proxy.
/// The proxy forwards while `up` is true; while it is false, new connections are closed as soon as
/// they are accepted and open ones are cut. The task ends when the sender of `up` is dropped.
pub async fn start_proxy(
    target: SocketAddr,
    up: watch::Receiver<bool>,
) -> std::io::Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    Ok((port, tokio::spawn(run_proxy(listener, target, up))))
}

async fn run_proxy(listener: tokio::net::TcpListener, target: SocketAddr, mut up: watch::Receiver<bool>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut inbound, _)) = accepted else { continue };
                if !*up.borrow() {
                    drop(inbound);
                    continue;
                }
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
            changed = up.changed() => {
                if changed.is_err() {
                    return;
                }
                if !*up.borrow_and_update() {
                    connections.abort_all();
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An echo server on loopback; answers its address.
    async fn echo() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(n) = stream.read(&mut buffer).await {
                        if n == 0 || stream.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        address
    }

    /// One round trip through the proxy: `true` when the echo came back.
    async fn round_trip(port: u16) -> bool {
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return false };
        if stream.write_all(b"ping").await.is_err() {
            return false;
        }
        let mut buffer = [0u8; 4];
        stream.read_exact(&mut buffer).await.is_ok() && &buffer == b"ping"
    }

    #[tokio::test]
    async fn a_cut_proxy_passes_nothing_and_forwards_again_on_the_same_port_when_restored() {
        let (up_tx, up_rx) = watch::channel(true);
        let (port, _task) = start_proxy(echo().await, up_rx).await.unwrap();
        assert!(round_trip(port).await);

        // An open connection is cut with the endpoint.
        let mut open = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        open.write_all(b"ping").await.unwrap();
        let mut buffer = [0u8; 4];
        open.read_exact(&mut buffer).await.unwrap();
        up_tx.send(false).unwrap();
        let mut rest = Vec::new();
        let cut = tokio::time::timeout(std::time::Duration::from_secs(30), open.read_to_end(&mut rest)).await;
        assert!(matches!(cut, Ok(Ok(0)) | Ok(Err(_))), "the open connection was cut: {cut:?}");
        assert!(!round_trip(port).await, "nothing passes while cut");

        up_tx.send(true).unwrap();
        assert!(round_trip(port).await, "the same port forwards again once restored");
    }
}
