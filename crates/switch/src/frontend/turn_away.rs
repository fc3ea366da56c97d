//! Turning away a connection over its client address's limit (see
//! [`crate::state::connection_limits`]): a `429` on a plain HTTP listener, then a lingering
//! close.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a plain HTTP client over its address's limit reads. Written without reading the
/// request: the answer is the same whatever it asked.
const TOO_MANY: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\n\
content-type: text/plain\r\n\
content-length: 44\r\n\
retry-after: 1\r\n\
connection: close\r\n\
\r\n\
too many connections open from your address\n";

/// How long a turned-away connection is drained before it is closed.
const LINGER: Duration = Duration::from_secs(1);

/// Turns away a connection over its address's limit: on a plain HTTP listener with the
/// `429` above, then a lingering close — the request is read and dropped for at most
/// [`LINGER`], since closing with it unread would send a reset that can destroy the answer
/// before the client reads it.
pub(crate) async fn turn_away<S>(mut stream: S, answer: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if !answer {
        return;
    }
    let linger = async {
        stream.write_all(TOO_MANY).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(LINGER, linger).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_declares_its_length() {
        let text = std::str::from_utf8(TOO_MANY).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len(), 44);
    }
}
