//! Links libsquall.so with `-Wl,--wrap=NAME` for the C library functions a program may also
//! define itself (see `src/libc_next.rs`): libsquall's own calls then never reach the
//! program's functions of those names.

/// The names wrapped; `src/libc_next.rs` (and, for the `read`/`write` family, `src/io.rs`)
/// defines `__wrap_NAME` for each.
const WRAPPED: &[&str] = &[
    "accept4",
    "bind",
    "close",
    "connect",
    "gettid",
    "listen",
    "open",
    "open64",
    "pause",
    "poll",
    "read",
    "recv",
    "recvfrom",
    "send",
    "sendmsg",
    "sendto",
    "shutdown",
    "socket",
    "write",
    "writev",
    "pread",
    "pwrite",
    "fread",
    "fwrite",
    "sigaction",
    "signal",
    "pthread_sigmask",
    "sigprocmask",
];
// (`src/io.rs` defines `read`, `send` ..., `src/signals.rs` `sigaction` ... for the program: libsquall's own references to those
// names must not reach them either, hence the same list.)

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        let wraps: Vec<String> = WRAPPED.iter().map(|n| format!("--wrap={n}")).collect();
        println!("cargo:rustc-cdylib-link-arg=-Wl,{}", wraps.join(","));
    }
}
