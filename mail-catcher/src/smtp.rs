//! The SMTP side (RFC 5321, the part a sender needs): greet, EHLO/HELO, MAIL, RCPT, DATA, RSET,
//! NOOP, QUIT. No TLS and no AUTH: the catcher listens on the loopback for the demo and the tests,
//! and a sender is told so by what EHLO does not offer.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::store::{Envelope, Store};

/// The largest message kept (a console mail is a few kilobytes).
pub const MAX_MESSAGE: usize = 10 << 20;
/// The longest command line (RFC 5321 allows 512 octets; some senders send a little more).
const MAX_LINE: usize = 4096;

pub async fn serve(listener: TcpListener, store: Arc<Store>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let store = store.clone();
        tokio::spawn(async move {
            if let Err(e) = session(stream, &store).await {
                tracing::debug!(error = %e, "an SMTP session ended early");
            }
        });
    }
}

async fn session(stream: TcpStream, store: &Store) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    write.write_all(b"220 mail-catcher ESMTP ready\r\n").await?;
    let mut envelope = Envelope::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        if read_line(&mut read, &mut line, MAX_LINE).await? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        let (verb, arg) = text.split_once(' ').unwrap_or((text, ""));
        let reply: &[u8] = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => b"250-mail-catcher\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 SIZE 10485760\r\n",
            "HELO" => b"250 mail-catcher\r\n",
            "MAIL" => match address(arg, "FROM:") {
                Some(from) => {
                    envelope = Envelope { from, to: vec![] };
                    b"250 OK\r\n"
                }
                None => b"501 Say MAIL FROM:<address>\r\n",
            },
            "RCPT" => match address(arg, "TO:") {
                Some(to) if !to.is_empty() => {
                    envelope.to.push(to);
                    b"250 OK\r\n"
                }
                _ => b"501 Say RCPT TO:<address>\r\n",
            },
            "DATA" if envelope.to.is_empty() => b"503 Name a recipient first\r\n",
            "DATA" => {
                write.write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n").await?;
                match data(&mut read).await? {
                    Some(message) => {
                        store.keep(std::mem::take(&mut envelope), message);
                        b"250 OK: kept\r\n"
                    }
                    None => {
                        envelope = Envelope::default();
                        b"552 The message is too large\r\n"
                    }
                }
            }
            "RSET" => {
                envelope = Envelope::default();
                b"250 OK\r\n"
            }
            "NOOP" => b"250 OK\r\n",
            "QUIT" => {
                write.write_all(b"221 Bye\r\n").await?;
                return Ok(());
            }
            _ => b"502 Not a command this server knows\r\n",
        };
        write.write_all(reply).await?;
    }
}

/// The address of `FROM:<a@b>` or `TO:<a@b>` (parameters after it, such as `SIZE=`, ignored).
fn address(arg: &str, prefix: &str) -> Option<String> {
    let rest = arg.get(..prefix.len()).filter(|p| p.eq_ignore_ascii_case(prefix)).map(|_| &arg[prefix.len()..])?;
    let rest = rest.trim_start();
    let inner = rest.strip_prefix('<')?.split_once('>')?.0;
    Some(inner.to_string())
}

/// A line, at most `max` bytes kept (the rest of a longer one is read and dropped).
async fn read_line<R: AsyncBufReadExt + Unpin>(r: &mut R, line: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
    let n = r.read_until(b'\n', line).await?;
    line.truncate(max);
    Ok(n)
}

/// The message after DATA, up to the line that is one dot, with dot-stuffing undone; None when
/// it is larger than `MAX_MESSAGE` (read to its end all the same, so the session can go on).
async fn data<R: AsyncBufReadExt + Unpin>(r: &mut R) -> std::io::Result<Option<String>> {
    let mut message = Vec::new();
    let mut line = Vec::new();
    let mut too_large = false;
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if line == b".\r\n" || line == b".\n" {
            break;
        }
        let content = if line.starts_with(b"..") { &line[1..] } else { &line[..] };
        if message.len() + content.len() > MAX_MESSAGE {
            too_large = true;
        } else if !too_large {
            message.extend_from_slice(content);
        }
    }
    Ok((!too_large).then(|| String::from_utf8_lossy(&message).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_read_from_between_its_brackets_whatever_follows() {
        assert_eq!(address("FROM:<a@b.test> SIZE=100", "FROM:").as_deref(), Some("a@b.test"));
        assert_eq!(address("to: <c@d.test>", "TO:").as_deref(), Some("c@d.test"));
        assert_eq!(address("FROM:<>", "FROM:").as_deref(), Some(""));
        assert_eq!(address("FROM:a@b", "FROM:"), None);
    }
}
