//! The sessions' negotiated timeouts, where the servers tell them: ZooKeeper
//! tells a session's timeout only to its own client, but each server's `cons`
//! four-letter word lists the connections it serves, each with its session id
//! (`sid=0x…`) and negotiated timeout (`to=…` ms). `cons` answers only where
//! `4lw.commands.whitelist` allows it (not by default since 3.5); elsewhere
//! every timeout stays unknown. Read every [`CONS_EVERY`] from every server.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How often the servers are asked.
pub const CONS_EVERY: Duration = Duration::from_secs(10);

/// How long one server may take to answer (connect and read).
const CONS_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of one answer read (about 200 bytes a connection: some 300,000
/// connections, far past what one ZooKeeper server serves). Reached, the rest
/// is not read and the sessions past it (and the line it cuts,
/// [`whole_lines`]) have their timeout unknown (as for a server that does
/// not answer). Fixed: only a broken or hostile server
/// sends that much, and this is what one such answer may cost.
const CONS_MAX_BYTES: u64 = 64 << 20;

/// Session (hex, as [`super::layout::session_hex`] writes it) → negotiated timeout in ms.
pub(crate) type Timeouts = HashMap<String, i64>;

/// What one `cons` answer says: each connection's session and timeout.
pub(crate) fn parse(answer: &str) -> Timeouts {
    let mut out = Timeouts::new();
    for line in answer.lines() {
        let field = |name: &str| {
            line.split(['(', ',', ')'])
                .find_map(|f| f.trim().strip_prefix(name))
                .map(str::to_string)
        };
        let (Some(sid), Some(to)) = (field("sid="), field("to=")) else {
            continue;
        };
        let Some(id) = sid.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()) else {
            continue;
        };
        if let Ok(to) = to.parse::<i64>() {
            out.insert(super::layout::session_hex(id as i64), to);
        }
    }
    out
}

/// `answer` without a last line cut by the `cap` (an answer of `cap` bytes
/// was cut: what follows its last newline is part of a line, whose `to=`
/// may be cut short, so it is not read).
fn whole_lines(answer: &str, cap: u64) -> &str {
    if (answer.len() as u64) < cap {
        return answer;
    }
    answer.rfind('\n').map_or("", |i| &answer[..=i])
}

/// Every server's `cons`, merged; a server that does not answer (down, or
/// `cons` not allowed) adds nothing.
pub(crate) async fn read(hosts: &[String]) -> Timeouts {
    let mut all = Timeouts::new();
    for host in hosts {
        let ask = async {
            let mut s = TcpStream::connect(host.as_str()).await?;
            s.write_all(b"cons").await?;
            let mut answer = String::new();
            s.take(CONS_MAX_BYTES).read_to_string(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        match tokio::time::timeout(CONS_TIMEOUT, ask).await {
            Ok(Ok(answer)) => all.extend(parse(whole_lines(&answer, CONS_MAX_BYTES))),
            Ok(Err(e)) => tracing::debug!(%host, error = %e, "zookeeper cons not read"),
            Err(_) => tracing::debug!(%host, "zookeeper cons not answered in time"),
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cons_answer_is_sessions_and_timeouts() {
        let answer = " /127.0.0.1:51234[1](queued=0,recved=9,sent=9,sid=0x1000156e1e40000,lop=PING,est=1795702794851,to=2000,lcxid=0x3,lzxid=0x4,lresp=1795702795851,llat=0,minlat=0,avglat=0,maxlat=1)\n \
             /127.0.0.1:51240[0](queued=0,recved=1,sent=0)\n\n";
        assert_eq!(parse(answer), Timeouts::from([("0x1000156e1e40000".to_string(), 2000)]));
        assert!(parse("cons is not executed because it is not in the whitelist.\n").is_empty());
    }

    /// docs/security.md: "one ZooKeeper server's `cons` answer | 64 MiB | fixed | the rest
    /// unread: sessions not in the part read (a line cut by the bound included) have their
    /// timeout unknown". Under the cap every line is read.
    #[test]
    fn an_answer_cut_at_the_cap_reads_its_whole_lines_only() {
        let first = " /127.0.0.1:1[1](sid=0x1,to=4000)\n";
        let cut = format!("{first} /127.0.0.1:2[1](sid=0x2,to=40");
        let cap = cut.len() as u64;
        assert_eq!(parse(&cut)["0x2"], 40, "what reading the cut line would say");
        assert_eq!(
            parse(whole_lines(&cut, cap)),
            Timeouts::from([("0x1".to_string(), 4000)]),
            "the cut session's timeout unknown, not 40"
        );
        assert_eq!(whole_lines(&cut, cap + 1), cut, "not cut: every line read");
        assert_eq!(CONS_MAX_BYTES, 64 << 20, "64 MiB");
    }
}
