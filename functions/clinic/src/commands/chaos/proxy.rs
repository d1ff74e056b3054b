//! The SQS fault: a TCP proxy in front of the emulator that the run can cut. The proxy, not the
//! emulator, is stopped: moto keeps queues in memory and would lose the messages it had accepted,
//! which real SQS never does, so an emulator restart would test the emulator, not the pipeline.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::watch;

/// A TCP proxy on 127.0.0.1:`port` to `target` while `up` is true; when it turns false the listener is
/// closed (connections are refused) and every open connection is cut.
pub async fn run_proxy(port: u16, target: SocketAddr, mut up: watch::Receiver<bool>) {
    loop {
        while !*up.borrow_and_update() {
            if up.changed().await.is_err() {
                return;
            }
        }
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listener,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((mut inbound, _)) = accepted {
                        connections.spawn(async move {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                }
                changed = up.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if !*up.borrow_and_update() {
                        break;
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        connections.abort_all();
    }
}
