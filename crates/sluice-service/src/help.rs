//! Help text, checked: every subcommand and flag a user can see says what
//! it does (each binary's tests call [`without_help`] on its command).

/// Every visible subcommand and flag of `cmd` without help text, as
/// `PATH --flag` or `PATH sub` (hidden subcommands are skipped whole).
pub fn without_help(cmd: &clap::Command) -> Vec<String> {
    let mut out = Vec::new();
    walk(cmd, cmd.get_name(), &mut out);
    out
}

fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        let builtin = matches!(a.get_id().as_str(), "help" | "version");
        if !a.is_hide_set() && !builtin && a.get_help().is_none() && a.get_long_help().is_none() {
            out.push(format!("{path} --{}", a.get_long().unwrap_or(a.get_id().as_str())));
        }
    }
    for s in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let sub = format!("{path} {}", s.get_name());
        if s.get_about().is_none() && s.get_long_about().is_none() {
            out.push(sub.clone());
        }
        walk(s, &sub, out);
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser, Subcommand};

    #[derive(Parser)]
    struct Cli {
        /// Documented.
        #[arg(long)]
        a: bool,
        #[arg(long)]
        b: bool,
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        /// Documented.
        One {
            #[arg(long)]
            c: bool,
        },
        Two,
        #[command(hide = true)]
        Hidden {
            #[arg(long)]
            d: bool,
        },
    }

    #[test]
    fn flags_and_subcommands_without_help_are_named() {
        let missing = super::without_help(&Cli::command());
        let name = Cli::command().get_name().to_owned();
        assert_eq!(missing, [format!("{name} --b"), format!("{name} one --c"), format!("{name} two")]);
    }
}
