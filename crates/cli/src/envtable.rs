//! Rendering `squall_core::env::ALL` and the `squall run` options for `squall env`, `squall
//! run --help` and docs/env.md. Owns text layout only (the options come from clap's own
//! description of `squall run`, so the table cannot drift from the parser).
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

/// One `squall run` option: how it is written, its default, its effect.
pub struct RunOption {
    pub spelling: String,
    pub default: String,
    pub effect: String,
}

/// Every `squall run` option and the positional PROGRAM, from clap's description of it.
pub fn run_options() -> Vec<RunOption> {
    use clap::Args;
    let cmd = crate::run::RunArgs::augment_args(clap::Command::new("run"));
    let mut out = Vec::new();
    for a in cmd.get_arguments() {
        if a.is_hide_set() {
            continue;
        }
        let value = a
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|_| a.get_action().takes_values())
            .unwrap_or_default();
        let mut spelling = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("-{s}, --{l}"),
            (None, Some(l)) => format!("--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, None) => String::new(),
        };
        if spelling.is_empty() {
            spelling = format!("{value} [ARGS...]");
        } else if !value.is_empty() {
            spelling = format!("{spelling} {value}");
        }
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = if !defaults.is_empty() {
            defaults.join(",")
        } else if a.is_required_set() {
            "(required)".into()
        } else if a.get_action().takes_values() {
            "(none)".into()
        } else {
            "not given".into()
        };
        let mut effect = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        let choices: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| p.get_name().to_string())
            .collect();
        if !choices.is_empty() && a.get_action().takes_values() {
            effect = format!("{effect}: {}", choices.join(", "));
        }
        out.push(RunOption {
            spelling,
            default,
            effect: effect.replace('\n', " "),
        });
    }
    out
}

/// The `squall run` options as aligned text.
pub fn options_table() -> String {
    let opts = run_options();
    let sw = opts.iter().map(|o| o.spelling.len()).max().unwrap_or(0);
    let dw = opts.iter().map(|o| o.default.len()).max().unwrap_or(0);
    let mut out = format!("{:sw$}  {:dw$}  EFFECT\n", "SQUALL RUN OPTION", "DEFAULT");
    for o in &opts {
        out.push_str(&format!(
            "{:sw$}  {:dw$}  {}\n",
            o.spelling, o.default, o.effect
        ));
    }
    out
}

/// The `squall run` options as Markdown (docs/env.md holds this).
pub fn options_markdown() -> String {
    let mut out = String::from("| `squall run` option | default | effect |\n|---|---|---|\n");
    for o in run_options() {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            o.spelling,
            o.default,
            o.effect.replace('|', "\\|")
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

    #[test]
    fn options_table_lists_every_run_option() {
        let m = super::options_markdown();
        for needle in [
            "`-n, --nodes N` | (required) |",
            "`--transport TRANSPORT` | tcp |",
            "`--timeout SECS` | (none) |",
            "`--stats` | not given |",
            "`--rsh CMD` | ssh |",
            "`PROGRAM [ARGS...]` | (required) |",
        ] {
            assert!(m.contains(needle), "{needle} missing in\n{m}");
        }
        assert!(!m.contains("--help"), "{m}");
        let t = super::options_table();
        assert!(t.contains("--net-faults SPEC"), "{t}");
    }
}
