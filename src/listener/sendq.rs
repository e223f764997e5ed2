//! How many bytes of a connection's answer the kernel still holds (its send queue: written by
//! sysport, not yet acknowledged by the client), read from `/proc/self/net/tcp` and `tcp6`
//! (the `tx_queue` column of the socket's local and remote address pair): the crate has no
//! unsafe code for `ioctl(SIOCOUTQ)`. Read only while an answer's writes are stalled, a few
//! seconds apart, so a client that takes its answer slowly is told from one that takes nothing.

use std::net::{IpAddr, SocketAddr};

/// The bytes the kernel holds for the TCP connection from `local` to `remote`; `None` when it
/// cannot be read (no `/proc`, or the connection is gone). `/proc` is read from memory: this
/// does not wait for a disk.
pub(super) fn queued(local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let table = match local.ip() {
        IpAddr::V4(_) => "/proc/self/net/tcp",
        IpAddr::V6(_) => "/proc/self/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    tx_queue(&text, &proc_addr(local), &proc_addr(remote))
}

/// An address as the kernel prints it there: each 32-bit word of the address in the host's
/// byte order, in hex, then the port.
fn proc_addr(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr.ip() {
        IpAddr::V4(ip) => vec![ip.octets()],
        IpAddr::V6(ip) => (ip.octets().chunks_exact(4))
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut text: String = (words.into_iter())
        .map(|w| format!("{:08X}", u32::from_ne_bytes(w)))
        .collect();
    text.push_str(&format!(":{:04X}", addr.port()));
    text
}

/// The `tx_queue` of the line for `local` and `remote` in a `/proc/net/tcp` table.
fn tx_queue(table: &str, local: &str, remote: &str) -> Option<u64> {
    table.lines().skip(1).find_map(|line| {
        let mut fields = line.split_ascii_whitespace().skip(1);
        let (l, r, _state, queues) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        if l != local || r != remote {
            return None;
        }
        u64::from_str_radix(queues.split_once(':')?.0, 16).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_of_the_address_pair_gives_its_send_queue() {
        let local: SocketAddr = "127.0.0.1:8000".parse().expect("addr");
        let remote: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        let (l, r) = (proc_addr(local), proc_addr(remote));
        if cfg!(target_endian = "little") {
            assert_eq!(l, "0100007F:1F40");
        }
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n\
             \x20  0: {l} 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n\
             \x20  1: {l} {r} 01 0003F000:00000000 01:00000014 00000000\n"
        );
        assert_eq!(tx_queue(&table, &l, &r), Some(0x3F000));
        assert_eq!(tx_queue(&table, &r, &l), None);
        let v6: SocketAddr = "[::ffff:127.0.0.1]:8000".parse().expect("addr");
        assert_eq!(proc_addr(v6).len(), 32 + 5);
    }

    #[tokio::test]
    async fn a_connection_nobody_reads_holds_what_was_written() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let client = tokio::net::TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (mut server, _) = listener.accept().await.expect("accept");
        let (local, remote) = (
            server.local_addr().expect("l"),
            server.peer_addr().expect("r"),
        );
        assert_eq!(queued(local, remote), Some(0));
        // More than the client's receive buffer takes: the rest stays in the send queue.
        let chunk = vec![b'x'; 64 << 10];
        let mut written = 0;
        while let Ok(Ok(n)) =
            tokio::time::timeout(std::time::Duration::from_millis(200), server.write(&chunk)).await
        {
            written += n;
        }
        let held = queued(local, remote).expect("a line for the connection");
        assert!(held > 0 && held <= written as u64, "{held} of {written}");
        drop(client);
    }
}
