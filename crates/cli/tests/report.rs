//! `squall report` end to end: the sample profile (tests/data/profile-sample.json, written
//! to the profile schema) is rendered to HTML by the real binary, and the page is opened in
//! headless Chromium, whose screenshot must be a non-blank PNG. Without Chromium the browser
//! part is skipped with a printed reason, unless CI is set (then Chromium must be there:
//! .ci/run installs it). Bad input is refused with exit 2.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/profile-sample.json")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("squall-report-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn render(out: &Path) -> String {
    let o = Command::new(SQUALL)
        .arg("report")
        .arg(sample())
        .arg("-o")
        .arg(out)
        .output()
        .expect("run squall report");
    assert!(
        o.status.success(),
        "squall report failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "problems: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        out.display().to_string()
    );
    std::fs::read_to_string(out).expect("the page")
}

/// `chromium` (Debian) or `chromium-browser`/`google-chrome` in PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Headless screenshot of `page` into `png`, killed after a generous deadline (a hang fails).
fn screenshot(browser: &Path, page: &Path, png: &Path, profile_dir: &Path) {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,1600")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match child.try_wait().expect("wait for chromium") {
            Some(_) => break,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("headless chromium did not finish the screenshot within 120 s");
            }
        }
    }
}

#[test]
fn sample_profile_renders_and_shows_in_a_headless_browser() {
    let dir = tmp("render");
    let html = dir.join("report.html");
    let page = render(&html);
    assert_eq!(page.matches("<svg").count(), 3, "three charts");
    for want in [
        "Faults over time per node",
        "Faults per page and node: fs.c:41 (main)",
        "Time breakdown per node",
        "fs.c:52 (main)",
        "lock.c:10 (main)",
        "barrier.c:12 (main)",
        "false sharing between nodes 0 and 1 on 16 pages",
    ] {
        assert!(page.contains(want), "the page lacks {want:?}");
    }
    // Self-contained: no script, nothing fetched (the only URL is the SVG namespace).
    assert!(!page.contains("<script"));
    assert!(
        !page.contains("src=") && !page.contains("href="),
        "a link out"
    );

    let Some(browser) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but chromium is missing (.ci/run installs it)");
        }
        println!("skipped the browser check: no chromium in PATH (apt-get install chromium)");
        return;
    };
    let png = dir.join("report.png");
    screenshot(&browser, &html, &png, &dir.join("chromium-profile"));
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A page of charts compresses far worse than a blank one (a white 1200x1600 PNG is ~10 KB).
    assert!(
        bytes.len() > 30_000,
        "the screenshot looks blank: {} bytes",
        bytes.len()
    );
    println!("screenshot {} ({} bytes)", png.display(), bytes.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused() {
    let dir = tmp("bad");
    let missing = Command::new(SQUALL)
        .args(["report"])
        .arg(dir.join("nope.json"))
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(2));
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{\"sites\": 3}").expect("write");
    let o = Command::new(SQUALL)
        .arg("report")
        .arg(&junk)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a squall profile"));
    let _ = std::fs::remove_dir_all(&dir);
}
