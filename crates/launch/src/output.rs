//! Forwarding node output: one reader thread per node stream, delivering whole lines to a
//! [`LineSink`]. Owns line splitting and the default sink (this process's stdout/stderr, with
//! an optional `[rank] ` prefix); must not touch process lifetimes.
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;

/// Which stream of a node a line came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives every line the nodes print, without its trailing newline. Called from the
/// launcher's reader threads, possibly concurrently.
pub trait LineSink: Send + Sync {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]);
}

/// Writes lines to this process's stdout/stderr (whole lines, flushed at once, so lines of
/// different nodes never mix), optionally prefixed with `[rank] `.
#[derive(Debug, Clone, Copy)]
pub struct ForwardSink {
    pub prefix: bool,
}

impl LineSink for ForwardSink {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        let mut buf = Vec::with_capacity(line.len() + 8);
        if self.prefix {
            buf.extend_from_slice(format!("[{rank}] ").as_bytes());
        }
        buf.extend_from_slice(line);
        buf.push(b'\n');
        // A closed stdout (e.g. `squall run ... | head`) must not kill the supervisor: errors
        // are dropped and the job goes on.
        let _ = match stream {
            Stream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(&buf).and_then(|_| out.flush())
            }
            Stream::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(&buf).and_then(|_| err.flush())
            }
        };
    }
}

/// Read `reader` to its end, handing each line to `sink`. A last line without a newline is
/// delivered too.
pub fn pump(reader: impl Read, rank: u16, stream: Stream, sink: &Arc<dyn LineSink>) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                sink.line(rank, stream, &line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Collect(Mutex<Vec<(u16, Stream, String)>>);
    impl LineSink for Collect {
        fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
            if let Ok(mut v) = self.0.lock() {
                v.push((rank, stream, String::from_utf8_lossy(line).into_owned()));
            }
        }
    }

    #[test]
    fn pump_splits_lines_and_keeps_an_unterminated_tail() {
        let collect = Arc::new(Collect::default());
        let sink: Arc<dyn LineSink> = collect.clone();
        pump(&b"one\n\nthree\ntail"[..], 5, Stream::Stderr, &sink);
        let got = collect.0.lock().map(|v| v.clone()).unwrap_or_default();
        let texts: Vec<&str> = got.iter().map(|(_, _, s)| s.as_str()).collect();
        assert_eq!(texts, vec!["one", "", "three", "tail"]);
        assert!(got.iter().all(|(r, s, _)| *r == 5 && *s == Stream::Stderr));
    }
}
