//! Parsing the one line every app run prints for the harness:
//! `RESULT app=<name> mode=<seq|native|squall> threads=<T> size=<s> time_s=<t> verified=<0|1>
//! check=<v> note="<text>"` (apps/README.md). Owns the parser; must not run anything.
use super::error::AppsError;

/// The line's leading tag.
pub const TAG: &str = "RESULT ";

/// One parsed RESULT line.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultLine {
    pub app: String,
    pub mode: String,
    pub threads: usize,
    pub size: String,
    /// Seconds of the parallel phase.
    pub time_s: f64,
    pub verified: bool,
    pub check: String,
    pub note: String,
}

/// Split `key=value key="quoted value" ...` into pairs. Quoted values may hold spaces and
/// `\"` escapes.
fn fields(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            if c.is_whitespace() {
                return Err(format!("field {key:?} has no value"));
            }
            key.push(c);
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    _ => value.push(c),
                }
            }
            if !closed {
                return Err(format!("unterminated quote in {key}"));
            }
        } else {
            while let Some(c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(*c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

impl ResultLine {
    /// Parse `line` (with its `RESULT ` tag). Unknown keys are ignored; `note` and `check`
    /// may be absent.
    pub fn parse(line: &str) -> Result<ResultLine, AppsError> {
        let bad = |why: String| AppsError::BadResultLine {
            line: line.to_string(),
            why,
        };
        let body = line
            .trim()
            .strip_prefix(TAG.trim_end())
            .ok_or_else(|| bad("no RESULT tag".into()))?;
        let pairs = fields(body).map_err(bad)?;
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let need = |k: &str| get(k).ok_or_else(|| bad(format!("no {k}")));
        let threads = need("threads")?;
        let time = need("time_s")?;
        let verified = need("verified")?;
        let time_s: f64 = time
            .parse()
            .map_err(|_| bad(format!("time_s {time:?} is not a number")))?;
        if !time_s.is_finite() || time_s < 0.0 {
            return Err(bad(format!("time_s {time} is not a duration")));
        }
        Ok(ResultLine {
            app: need("app")?,
            mode: need("mode")?,
            threads: threads
                .parse()
                .map_err(|_| bad(format!("threads {threads:?} is not a count")))?,
            size: need("size")?,
            time_s,
            verified: match verified.as_str() {
                "1" => true,
                "0" => false,
                other => return Err(bad(format!("verified {other:?} is not 0 or 1"))),
            },
            check: get("check").unwrap_or_default(),
            note: get("note").unwrap_or_default(),
        })
    }

    /// Is this (trimmed) output line a RESULT line?
    pub fn is_result(line: &str) -> bool {
        line.trim_start().starts_with(TAG)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_line() {
        let r = ResultLine::parse(
            r#"RESULT app=sor mode=native threads=4 size=tiny time_s=0.0123 verified=1 check=65.5 note="0 mismatches, \"exact\"""#,
        )
        .expect("parses");
        assert_eq!(r.app, "sor");
        assert_eq!(r.mode, "native");
        assert_eq!(r.threads, 4);
        assert_eq!(r.size, "tiny");
        assert!((r.time_s - 0.0123).abs() < 1e-12);
        assert!(r.verified);
        assert_eq!(r.check, "65.5");
        assert_eq!(r.note, "0 mismatches, \"exact\"");
    }

    #[test]
    fn rejects_malformed_lines_naming_the_problem() {
        let e = ResultLine::parse("RESULT app=sor mode=seq threads=1 size=tiny verified=1")
            .expect_err("no time");
        assert!(e.to_string().contains("no time_s"), "{e}");
        let e =
            ResultLine::parse("RESULT app=sor mode=seq threads=x size=tiny time_s=1 verified=1")
                .expect_err("bad threads");
        assert!(e.to_string().contains("threads \"x\""), "{e}");
        let e =
            ResultLine::parse("RESULT app=sor mode=seq threads=1 size=tiny time_s=1 verified=2")
                .expect_err("bad verified");
        assert!(e.to_string().contains("verified"), "{e}");
        let e = ResultLine::parse(r#"RESULT app=sor note="open"#).expect_err("open quote");
        assert!(e.to_string().contains("unterminated"), "{e}");
        assert!(ResultLine::parse("hello").is_err());
        assert!(ResultLine::is_result("RESULT app=x"));
        assert!(!ResultLine::is_result("RESULTS are in"));
    }
}
