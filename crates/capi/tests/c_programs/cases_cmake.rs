//! Cases for the installed CMake package (`find_package(Squall)`, `lib/cmake/Squall`): the
//! project in `c-tests/cmake/` is configured against the temporary prefix, built with CMake,
//! and its C and C++ programs (C API and pthreads layer) run as 2-node jobs checking their
//! answers; the compile and link lines CMake used must hold every flag pkg-config gives.
use super::{job, native_answer, plain, sh, Cases, Env};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Configure and build `c-tests/cmake` once (later cases reuse the build directory).
fn cmake_build(env: &Env) -> Result<PathBuf, String> {
    let dir = env.bin.join("cmake-build");
    if dir.join("cm_cxx_pthread").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    sh(
        Command::new("cmake")
            .arg("-S")
            .arg(env.src.join("cmake"))
            .arg("-B")
            .arg(&dir)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", env.prefix.display()))
            .arg("-DCMAKE_BUILD_TYPE=Release"),
        "cmake configure (install cmake: .ci/setup.sh)",
    )?;
    sh(
        Command::new("cmake").arg("--build").arg(&dir).arg("-j2"),
        "cmake --build",
    )?;
    Ok(dir)
}

/// The flags CMake put on `target`'s compile and link lines (Makefile generator files).
fn cmake_lines(dir: &Path, target: &str) -> Result<String, String> {
    let tdir = dir.join("CMakeFiles").join(format!("{target}.dir"));
    let mut all = String::new();
    for f in ["flags.make", "link.txt"] {
        let p = tdir.join(f);
        all += &std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        all.push('\n');
    }
    Ok(all)
}

/// Every flag of `pkg-config --cflags --libs pkg` appears on `target`'s CMake lines (an include
/// directory as -I or -isystem, CMake's form for imported targets).
fn same_flags_as_pkg_config(env: &Env, dir: &Path, target: &str, pkg: &str) -> Result<(), String> {
    let lines = cmake_lines(dir, target)?;
    let words: Vec<&str> = lines.split_whitespace().collect();
    let flags = env.pkg_config(&["--cflags", "--libs", pkg])?;
    let mut i = 0;
    while i < flags.len() {
        let f = flags[i].as_str();
        let ok = if let Some(inc) = f.strip_prefix("-I") {
            words.windows(2).any(|w| w[0] == "-isystem" && w[1] == inc) || words.contains(&f)
        } else if f == "-include" && i + 1 < flags.len() {
            i += 1;
            let file = flags[i].as_str();
            words.windows(2).any(|w| w[0] == "-include" && w[1] == file)
        } else {
            words.contains(&f)
        };
        if !ok {
            return Err(format!(
                "{target}: `pkg-config --cflags --libs {pkg}` gives {f} (in {flags:?}), which \
                 CMake's lines lack:\n{lines}"
            ));
        }
        i += 1;
    }
    Ok(())
}

/// Every pkg-config file the install put in `lib/pkgconfig` (`squall`, `squall-pthread`, and
/// any later layer's, e.g. `squall-openmp`).
fn installed_packages(env: &Env) -> Result<Vec<String>, String> {
    let dir = env.prefix.join("lib/pkgconfig");
    let mut pcs: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".pc")?.to_string())
        })
        .collect();
    pcs.sort();
    Ok(pcs)
}

/// `squall` -> `squall`, `squall-X` -> `X`: the target is `Squall::` + this.
fn target_suffix(pkg: &str) -> &str {
    pkg.strip_prefix("squall-").unwrap_or(pkg)
}

pub fn add(v: &mut Cases) {
    v.add("cmake/flags as pkg-config", |env: &Env| {
        let dir = cmake_build(env)?;
        same_flags_as_pkg_config(env, &dir, "cm_api_test", "squall")?;
        same_flags_as_pkg_config(env, &dir, "cm_primes", "squall-pthread")?;
        same_flags_as_pkg_config(env, &dir, "cm_cxx_pthread", "squall-pthread")
    });
    // A target for every installed .pc file, carrying its flags: a project linking one
    // program per package is configured (not built: the lines are written at configure time).
    v.add("cmake/a target per pkg-config file", |env: &Env| {
        let pcs = installed_packages(env)?;
        if !(pcs.contains(&"squall".to_string()) && pcs.contains(&"squall-pthread".to_string())) {
            return Err(format!("installed packages: {pcs:?}"));
        }
        let root = env.bin.join("cmake-every-pc");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("src")).map_err(|e| e.to_string())?;
        std::fs::write(root.join("src/main.c"), "int main(void) { return 0; }\n")
            .map_err(|e| e.to_string())?;
        let comps: Vec<&str> = pcs.iter().map(|p| target_suffix(p)).collect();
        let mut cm = format!(
            "cmake_minimum_required(VERSION 3.13)\nproject(every C)\n\
             find_package(Squall REQUIRED COMPONENTS {})\n",
            comps.join(" ")
        );
        for c in &comps {
            cm += &format!(
                "add_executable(t_{c} main.c)\ntarget_link_libraries(t_{c} PRIVATE Squall::{c})\n"
            );
        }
        std::fs::write(root.join("src/CMakeLists.txt"), cm).map_err(|e| e.to_string())?;
        sh(
            Command::new("cmake")
                .arg("-S")
                .arg(root.join("src"))
                .arg("-B")
                .arg(root.join("build"))
                .arg(format!("-DCMAKE_PREFIX_PATH={}", env.prefix.display())),
            "cmake configure of one program per package",
        )?;
        for (pkg, c) in pcs.iter().zip(&comps) {
            same_flags_as_pkg_config(env, &root.join("build"), &format!("t_{c}"), pkg)?;
            println!("    {pkg}.pc -> Squall::{c}");
        }
        Ok(())
    });
    v.add("cmake/c_api/2 nodes", |env: &Env| {
        let dir = cmake_build(env)?;
        job(&dir.join("cm_api_test"), &["locks", "3"], 2, "ok locks")
    });
    v.add("cmake/cxx/2 nodes", |env: &Env| {
        let dir = cmake_build(env)?;
        job(&dir.join("cm_cxx_test"), &["3"], 2, "ok cxx")
    });
    v.add("cmake/pthreads primes/2 nodes", |env: &Env| {
        let dir = cmake_build(env)?;
        let args = ["200000", "6"];
        // The native build's answer, from CMake's Threads::Threads build of the same source.
        let native = plain(&dir.join("cm_primes_native"), &args)?;
        let want = native
            .lines()
            .find(|l| l.starts_with("primes"))
            .ok_or_else(|| format!("the native primes printed {native:?}"))?
            .to_string();
        // And the pkg-config harness's native build agrees (same compiler, same source).
        let (cc_want, _) = native_answer(
            env,
            "cc",
            &env.src.join("primes.c"),
            "primes_native",
            &args,
            None,
            "primes",
        )?;
        if cc_want != want {
            return Err(format!("native answers differ: {want:?} vs {cc_want:?}"));
        }
        job(&dir.join("cm_primes"), &args, 2, &want)
    });
    v.add("cmake/pthreads plain globals/2 nodes", |env: &Env| {
        let dir = cmake_build(env)?;
        job(
            &dir.join("cm_plain_globals"),
            &["-p", "4", "-n", "200000"],
            2,
            "ok plain globals",
        )
    });
    v.add("cmake/c++ pthread/2 nodes", |env: &Env| {
        let dir = cmake_build(env)?;
        job(&dir.join("cm_cxx_pthread"), &["6"], 2, "ok cxx pthread")
    });
    v.add("cmake/version and components", |env: &Env| {
        // A newer version or a missing component is refused at configure time with a message.
        let root = env.bin.join("cmake-refuse");
        for (want, needle) in [
            ("find_package(Squall 99.0 REQUIRED)", "99.0"),
            (
                "find_package(Squall REQUIRED COMPONENTS no_such_layer)",
                "no_such_layer",
            ),
        ] {
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("src")).map_err(|e| e.to_string())?;
            std::fs::write(
                root.join("src/CMakeLists.txt"),
                format!("cmake_minimum_required(VERSION 3.13)\nproject(r C)\n{want}\n"),
            )
            .map_err(|e| e.to_string())?;
            let out = Command::new("cmake")
                .arg("-S")
                .arg(root.join("src"))
                .arg("-B")
                .arg(root.join("build"))
                .arg(format!("-DCMAKE_PREFIX_PATH={}", env.prefix.display()))
                .output()
                .map_err(|e| format!("cmake: {e}"))?;
            let text = String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout);
            if out.status.success() || !text.contains(needle) {
                return Err(format!(
                    "{want}: configure should fail naming {needle}: {text}"
                ));
            }
        }
        Ok(())
    });
}
