//! Errors of `squall bench apps`: one enum, lowercase messages naming the app, binary, node
//! count or file involved. Owns error kinds only; must not decide what to do about them.
use std::path::PathBuf;

/// Why the application benchmark could not do (part of) its work.
#[derive(Debug, thiserror::Error)]
pub enum AppsError {
    /// An app binary the plan needs is not built.
    #[error("{} not found: run `{hint}`", path.display())]
    MissingBinary { path: PathBuf, hint: String },
    /// `--apps all` (or an explicit list) found nothing to run.
    #[error("no app binaries (*_seq) in {}: run `make -C apps`", dir.display())]
    NoApps { dir: PathBuf },
    /// A bad command-line value.
    #[error("{0}")]
    Usage(String),
    /// Some runs did not print verified=1 or did not exit 0 (the reports are written anyway).
    #[error("not verified: {what} (see {})", report.display())]
    NotVerified { what: String, report: PathBuf },
    /// Reading or writing a file failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The launcher could not start a run.
    #[error("{app} {mode} n={nodes}: cannot start: {why}")]
    Launch {
        app: String,
        mode: String,
        nodes: usize,
        why: String,
    },
    /// A `RESULT` line did not have the documented form.
    #[error("bad RESULT line ({why}): {line}")]
    BadResultLine { line: String, why: String },
    /// An apps.json (for `--from-json`) or a statistics file did not parse.
    #[error("cannot parse {}: {why}", path.display())]
    BadJson { path: PathBuf, why: String },
    /// The plot font is not installed.
    #[error("font {} not found ({source}): run `apt-get install fonts-dejavu-core` or pass --no-plots (or set SQUALL_PLOT_FONT to a .ttf file)", path.display())]
    FontMissing {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Drawing a plot failed.
    #[error("cannot draw {file}: {why}")]
    Plot { file: String, why: String },
}

impl AppsError {
    /// An [`AppsError::Io`] for `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> AppsError {
        AppsError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
