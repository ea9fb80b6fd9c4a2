//! Rendering `squall_core::env::ALL` for `squall env` and `squall run --help`. Owns text
//! layout only.
use squall_core::env::ALL;

/// The environment table as aligned text, one variable per line.
pub fn table() -> String {
    let name_w = ALL.iter().map(|v| v.name.len()).max().unwrap_or(0);
    let def_w = ALL.iter().map(|v| v.default.len()).max().unwrap_or(0);
    let mut out = format!("{:name_w$}  {:def_w$}  MEANING\n", "VARIABLE", "DEFAULT");
    for v in ALL {
        out.push_str(&format!(
            "{:name_w$}  {:def_w$}  {}\n",
            v.name, v.default, v.meaning
        ));
    }
    out
}

/// The environment table as Markdown (docs/env.md and the README hold this).
pub fn markdown() -> String {
    let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for v in ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            v.name, v.default, v.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_lists_every_variable() {
        let t = super::table();
        for v in squall_core::env::ALL {
            assert!(t.contains(v.name), "{} missing", v.name);
        }
        assert_eq!(t.lines().count(), squall_core::env::ALL.len() + 1);
        let m = super::markdown();
        assert_eq!(m.lines().count(), squall_core::env::ALL.len() + 2);
        assert!(m.contains("| `SQUALL_RANK` |"));
    }
}
